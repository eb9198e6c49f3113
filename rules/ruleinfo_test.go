package rules

import (
	"encoding/json"
	"strings"
	"testing"
	"time"
)

// Every listing writes a rule the same way: the window as in rule files
// and in seconds, lists never null; and the JSON reads back.
func TestRuleInfoJSON(t *testing.T) {
	for _, tc := range []struct {
		window time.Duration
		want   string
	}{
		{time.Minute, `"window":"1m","window_seconds":60`},
		{90 * time.Minute, `"window":"1h30m","window_seconds":5400`},
		{500 * time.Millisecond, `"window":"500ms","window_seconds":0.5`},
		{0, `"window":"","window_seconds":0`},
	} {
		t.Run(tc.window.String(), func(t *testing.T) {
			ri := RuleInfo{Name: "r", Limit: 5, Window: tc.window}
			b, err := json.Marshal(ri)
			if err != nil {
				t.Fatal(err)
			}
			s := string(b)
			if !strings.Contains(s, tc.want) || !strings.Contains(s, `"count_by":[]`) || !strings.Contains(s, `"overrides":[]`) {
				t.Errorf("window %v: %s, want %s and empty lists", tc.window, s, tc.want)
			}
			var back RuleInfo
			if err := json.Unmarshal(b, &back); err != nil {
				t.Fatal(err)
			}
			if back.Window != tc.window || back.Name != "r" || back.Limit != 5 {
				t.Errorf("window %v: read back %+v", tc.window, back)
			}
		})
	}
}
