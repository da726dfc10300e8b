package store

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
)

// Reservations written by racing updates are all kept: each update reads
// the others' (the version condition), starting from no item at all; a
// refusal and ErrUnchanged write nothing.
func TestUpdateReservations(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := emulatorStore(t)
	var wg sync.WaitGroup
	for i := range 6 {
		wg.Go(func() {
			err := s.UpdateReservations(ctx, "acme", func(rs *Reservations) error {
				rs.Batches[fmt.Sprint("b", i)] = Reservation{Tokens: int64(i + 1), Rows: 1}
				return nil
			})
			if err != nil {
				t.Errorf("update %d: %v", i, err)
			}
		})
	}
	wg.Wait()
	read := func() Reservations {
		var got Reservations
		err := s.UpdateReservations(ctx, "acme", func(rs *Reservations) error { got = *rs; return ErrUnchanged })
		if err != nil {
			t.Fatal(err)
		}
		return got
	}
	if got := read(); len(got.Batches) != 6 || got.Batches["b5"].Tokens != 6 {
		t.Fatalf("reservations %+v, want the 6 written", got.Batches)
	}
	refused := errors.New("refused")
	err := s.UpdateReservations(ctx, "acme", func(rs *Reservations) error { delete(rs.Batches, "b0"); return refused })
	if !errors.Is(err, refused) || len(read().Batches) != 6 {
		t.Fatalf("refused update: %v, %d left; want the error and nothing written", err, len(read().Batches))
	}
}
