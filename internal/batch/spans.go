package batch

import (
	"fmt"
	"strconv"
	"strings"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
)

// Spans are a chunk's runs of rows. They are stored as one string
// attribute, each span as four base-36 numbers relative to the span before
// it (the gap of bytes and of rows before it, its bytes and its rows): a
// chunk of 768 rows alternating with another model's has 768 spans, which
// as a list of maps would make the chunk item ten times larger, and every
// claim, renewal and commit writes it (docs/design.md "Chunks").
type Spans []Span

// MarshalDynamoDBAttributeValue writes the spans as one string.
func (ss Spans) MarshalDynamoDBAttributeValue() (types.AttributeValue, error) {
	if len(ss) == 0 {
		return &types.AttributeValueMemberNULL{Value: true}, nil
	}
	var b strings.Builder
	var end int64
	var row int
	for i, s := range ss {
		if i > 0 {
			b.WriteByte(';')
		}
		fmt.Fprintf(&b, "%s,%s,%s,%s", strconv.FormatInt(s.Start-end, 36), strconv.FormatInt(s.End-s.Start, 36),
			strconv.FormatInt(int64(s.Row-row), 36), strconv.FormatInt(int64(s.Rows), 36))
		end, row = s.End, s.Row+s.Rows
	}
	return &types.AttributeValueMemberS{Value: b.String()}, nil
}

// UnmarshalDynamoDBAttributeValue reads what MarshalDynamoDBAttributeValue
// wrote.
func (ss *Spans) UnmarshalDynamoDBAttributeValue(av types.AttributeValue) error {
	s, ok := av.(*types.AttributeValueMemberS)
	if !ok {
		if _, null := av.(*types.AttributeValueMemberNULL); null {
			*ss = nil
			return nil
		}
		return fmt.Errorf("spans: %T, want a string", av)
	}
	*ss = nil
	if s.Value == "" {
		return nil
	}
	var end int64
	var row int
	for _, part := range strings.Split(s.Value, ";") {
		f := strings.Split(part, ",")
		if len(f) != 4 {
			return fmt.Errorf("spans: %q is not four numbers", part)
		}
		var n [4]int64
		for i := range f {
			v, err := strconv.ParseInt(f[i], 36, 64)
			if err != nil {
				return fmt.Errorf("spans: %q: %w", part, err)
			}
			n[i] = v
		}
		sp := Span{Start: end + n[0], Row: row + int(n[2]), Rows: int(n[3])}
		sp.End = sp.Start + n[1]
		*ss = append(*ss, sp)
		end, row = sp.End, sp.Row+sp.Rows
	}
	return nil
}
