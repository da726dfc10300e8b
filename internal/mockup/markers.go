package mockup

import (
	"fmt"
	"maps"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"
)

var markerRE = regexp.MustCompile(`\[\[mock:([^\[\]]*)\]\]`)

// markers are the instructions a request body carries for the mock.
type markers struct {
	status    int           // [[mock:NNN]]
	sleep     time.Duration // [[mock:sleep=D]]
	hang      bool          // [[mock:hang]]
	fail      int           // [[mock:fail=N]]
	rateLimit int           // [[mock:429x=N]]
	// expire ([[mock:batch_expire]]) makes the row expire inside a
	// provider batch, unrun; a request made directly ignores it.
	expire bool
}

// findMarkers reads the markers in every string of the body. Several of a
// kind combine by taking the strongest, so the order they are found in
// does not matter.
func findMarkers(body any) (markers, error) {
	var m markers
	err := eachString(body, func(s string) error {
		for _, match := range markerRE.FindAllStringSubmatch(s, -1) {
			if err := m.add(match[1]); err != nil {
				return err
			}
		}
		return nil
	})
	return m, err
}

func (m *markers) add(spec string) error {
	name, arg, hasArg := strings.Cut(spec, "=")
	switch {
	case name == "hang" && !hasArg:
		m.hang = true
	case name == "batch_expire" && !hasArg:
		m.expire = true
	case name == "sleep" && hasArg:
		d, err := time.ParseDuration(arg)
		if err != nil || d < 0 {
			return fmt.Errorf("marker [[mock:%s]]: want a non-negative Go duration such as 1500ms", spec)
		}
		m.sleep = max(m.sleep, d)
	case (name == "fail" || name == "429x") && hasArg:
		n, err := strconv.Atoi(arg)
		if err != nil || n < 0 {
			return fmt.Errorf("marker [[mock:%s]]: want a non-negative count", spec)
		}
		if name == "fail" {
			m.fail = max(m.fail, n)
		} else {
			m.rateLimit = max(m.rateLimit, n)
		}
	case !hasArg:
		status, err := parseStatus(name)
		if err != nil {
			return fmt.Errorf("unknown marker [[mock:%s]]", spec)
		}
		m.status = max(m.status, status)
	default:
		return fmt.Errorf("unknown marker [[mock:%s]]", spec)
	}
	return nil
}

// eachString visits every string in a decoded JSON value, object keys in
// sorted order so that the first error reported is always the same one.
func eachString(v any, visit func(string) error) error {
	switch x := v.(type) {
	case string:
		return visit(x)
	case []any:
		for _, e := range x {
			if err := eachString(e, visit); err != nil {
				return err
			}
		}
	case map[string]any:
		for _, k := range slices.Sorted(maps.Keys(x)) {
			if err := eachString(x[k], visit); err != nil {
				return err
			}
		}
	}
	return nil
}
