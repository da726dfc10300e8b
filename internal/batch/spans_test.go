package batch

import (
	"slices"
	"testing"

	"github.com/aws/aws-sdk-go-v2/feature/dynamodb/attributevalue"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
)

func TestSpansRoundTrip(t *testing.T) {
	t.Parallel()
	tests := []Spans{
		nil,
		{{Start: 0, End: 120, Row: 0, Rows: 1}},
		{{Start: 10, End: 20, Row: 3, Rows: 1}, {Start: 40, End: 100, Row: 5, Rows: 3}, {Start: 1 << 40, End: 1<<40 + 7, Row: 1 << 20, Rows: 1}},
	}
	for _, ss := range tests {
		c := Chunk{Batch: "b", Spans: ss}
		item, err := attributevalue.MarshalMap(c)
		if err != nil {
			t.Fatal(err)
		}
		if len(ss) > 0 {
			if _, ok := item["spans"].(*types.AttributeValueMemberS); !ok {
				t.Fatalf("spans stored as %T, want one string", item["spans"])
			}
		}
		var got Chunk
		if err := attributevalue.UnmarshalMap(item, &got); err != nil {
			t.Fatal(err)
		}
		if !slices.Equal(got.Spans, ss) {
			t.Fatalf("round trip of %v: got %v", ss, got.Spans)
		}
	}
}

func TestSpansRefusesGarbage(t *testing.T) {
	t.Parallel()
	var ss Spans
	for _, v := range []string{"1,2,3", "a,b,c,!"} {
		if err := ss.UnmarshalDynamoDBAttributeValue(&types.AttributeValueMemberS{Value: v}); err == nil {
			t.Errorf("%q: no error", v)
		}
	}
}

func TestNoSpansNoAttribute(t *testing.T) {
	t.Parallel()
	item, err := attributevalue.MarshalMap(Chunk{Batch: "b"})
	if err != nil {
		t.Fatal(err)
	}
	if av, ok := item["spans"]; ok {
		t.Fatalf("a chunk of one span stores spans %#v", av)
	}
}
