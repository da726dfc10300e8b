package store

import (
	"context"
	"errors"
	"fmt"
	"testing"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
)

// GET /v1/usage?group_by= read every usage record by key and batch of the
// range in one answer, whatever their number (start_time=0 reads a
// tenant's whole history: a record per day, key, batch and model). A read
// past its cap stops with ErrTooMany.
func TestUsageDetailsCapped(t *testing.T) {
	t.Parallel()
	s := emulatorStore(t)
	ctx := context.Background()
	for i := range 5 {
		it := item{"pk": avS(usageByPK("acme")), "sk": avS(usageBySK(fmt.Sprintf("2026-01-0%d", i+1), "k1", fmt.Sprintf("batch_%d", i), "m")),
			"day": avS(fmt.Sprintf("2026-01-0%d", i+1)), "model": avS("m"), "key_id": avS("k1"), "batch_id": avS(fmt.Sprintf("batch_%d", i))}
		if _, err := s.DB.PutItem(ctx, &dynamodb.PutItemInput{TableName: &s.Table, Item: it}); err != nil {
			t.Fatal(err)
		}
	}
	if rows, err := s.UsageDetails(ctx, "acme", "2026-01-01", "2026-01-31", 5); err != nil || len(rows) != 5 {
		t.Fatalf("5 records, cap 5: %d rows, %v", len(rows), err)
	}
	if rows, err := s.UsageDetails(ctx, "acme", "2026-01-01", "2026-01-31", 4); !errors.Is(err, ErrTooMany) {
		t.Fatalf("5 records, cap 4: %d rows, %v; want ErrTooMany", len(rows), err)
	}
}
