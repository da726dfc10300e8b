package batch

import "testing"

func TestOutAddsProgress(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		b    Batch
		want Counts
	}{
		{"none", Batch{RequestCounts: Counts{Total: 10, Completed: 3}}, Counts{Total: 10, Completed: 3}},
		{"running rows", Batch{RequestCounts: Counts{Total: 10, Completed: 3, Failed: 1}, ProgressCompleted: 4, ProgressFailed: 1}, Counts{Total: 10, Completed: 7, Failed: 2}},
		{"never past the total", Batch{RequestCounts: Counts{Total: 10, Completed: 8}, ProgressCompleted: 5, ProgressFailed: 5}, Counts{Total: 10, Completed: 10}},
		{"a negative share is ignored", Batch{RequestCounts: Counts{Total: 10, Completed: 8}, ProgressCompleted: -2}, Counts{Total: 10, Completed: 8}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			if got := tt.b.Out().RequestCounts; got != tt.want {
				t.Fatalf("Out().RequestCounts = %+v, want %+v", got, tt.want)
			}
		})
	}
}
