package rules

import (
	"fmt"
	"math/bits"
	"sort"
	"strings"

	"go.yaml.in/yaml/v3"
)

// Prices
//
// A rule file may hold a price table:
//
//	prices:
//	  unit: USD cent
//	  models:
//	    gpt-4o: {input: 250, output: 1000, cached_input: 125}
//
// Each price is in the currency's smallest unit per million tokens, with
// at most six decimals (kept exactly, as integers of 10^-6 unit). A rule
// with cost: {usage: money} counts what a request's tokens cost; cost:
// {usage: tokens} (or input_tokens, output_tokens, cached_input_tokens)
// counts its tokens. The cost of a request is rounded up to a whole unit
// (never in the spender's favour), and is at least 1.
//
// A request gives its usage (Request.Usage: the model and its token
// counts), or, over RLS, each descriptor names a model and a token kind in
// the entries model and tokens (input, output or cached_input) and its
// hits are the token count; such a descriptor is priced on its own,
// rounded up. A request with neither is charged its hits as the cost (an
// estimate in the rule's unit, as a check before the response gives). A
// model the table does not price is an error (ErrInvalidRequest), never a
// cost of 0.

// TokenUsage is what a request to a language model used: the model and its
// token counts. InputTokens are the input tokens not read from the
// provider's cache, CachedInputTokens those read from it (OpenAI's
// prompt_tokens less prompt_tokens_details.cached_tokens, and
// cached_tokens).
type TokenUsage struct {
	Model                                        string
	InputTokens, OutputTokens, CachedInputTokens int64
}

// IsZero reports whether u gives no usage.
func (u TokenUsage) IsZero() bool { return u == TokenUsage{} }

// usageKind is what a rule with cost: {usage: ...} counts.
type usageKind uint8

const (
	usageNone usageKind = iota
	usageMoney
	usageTokens
	usageInput
	usageOutput
	usageCached
)

var usageKinds = map[string]usageKind{"money": usageMoney, "tokens": usageTokens, "input_tokens": usageInput,
	"output_tokens": usageOutput, "cached_input_tokens": usageCached}

// usageName returns the name of k in a rule file.
func usageName(k usageKind) string {
	for name, v := range usageKinds {
		if v == k {
			return name
		}
	}
	return ""
}

// tokenKinds are the values of a descriptor's tokens entry, and the kinds
// of usage that count them.
var tokenKinds = map[string]usageKind{"input": usageInput, "output": usageOutput, "cached_input": usageCached}

// priceTable is a rule file's prices.
type priceTable struct {
	unit   string
	models map[string]modelPrice
}

// modelPrice is one model's prices, in millionths of the unit per million
// tokens.
type modelPrice struct{ input, output, cached int64 }

// priceScale is how many of a price's integers make one unit per million
// tokens (six decimals), and tokenScale the million tokens.
const (
	priceScale = 1_000_000
	tokenScale = 1_000_000
	// maxPrice bounds a price (in units per million tokens): 10^9, so that
	// a request's cost is exact in 128 bits.
	maxPrice = 1_000_000_000
)

var priceFields = []string{"unit", "models"}
var modelPriceFields = []string{"input", "output", "cached_input"}

// prices parses a file's price table.
func (d *decoder) prices(n *yaml.Node) *priceTable {
	f := d.fields(n, "prices", priceFields...)
	p := &priceTable{models: map[string]modelPrice{}}
	if v, ok := f["unit"]; ok {
		p.unit, _ = d.str(v.value, "prices: unit")
	}
	m, ok := f["models"]
	if !ok {
		d.errorf(n, "prices: models is missing; add one such as models: {gpt-4o: {input: 250, output: 1000}}")
		return p
	}
	if m.value.Kind != yaml.MappingNode {
		d.errorf(m.value, "prices: models must be a mapping of model: {input, output, cached_input}; got %s", kindName(m.value))
		return p
	}
	for i := 0; i+1 < len(m.value.Content); i += 2 {
		k, v := m.value.Content[i], m.value.Content[i+1]
		name := k.Value
		what := fmt.Sprintf("prices: model %q", clip(name))
		if _, dup := p.models[name]; dup || name == "" {
			d.errorf(k, "%s: give each model once, with a name", what)
			continue
		}
		mf := d.fields(v, what, modelPriceFields...)
		var mp modelPrice
		for field, dst := range map[string]*int64{"input": &mp.input, "output": &mp.output, "cached_input": &mp.cached} {
			if fv, ok := mf[field]; ok {
				*dst = d.price(fv.value, what+": "+field)
			}
		}
		if _, ok := mf["input"]; !ok {
			d.errorf(v, "%s: input is missing (the price per million input tokens)", what)
		}
		if _, ok := mf["output"]; !ok {
			d.errorf(v, "%s: output is missing (the price per million output tokens)", what)
		}
		if _, ok := mf["cached_input"]; !ok {
			mp.cached = mp.input // cached input tokens cost what input tokens cost unless said
		}
		p.models[name] = mp
	}
	return p
}

// price reads a price: a number from 0 to maxPrice with at most six
// decimals, returned exactly in millionths.
func (d *decoder) price(n *yaml.Node, what string) int64 {
	bad := func() int64 {
		d.errorf(n, "%s: a price must be a number from 0 to %d with at most six decimals, such as 2.5; got %q", what, maxPrice, clip(n.Value))
		return 0
	}
	if n.Kind != yaml.ScalarNode || (n.Tag != "!!int" && n.Tag != "!!float") {
		return bad()
	}
	whole, frac, _ := strings.Cut(strings.ReplaceAll(n.Value, "_", ""), ".")
	if whole == "" || len(frac) > 6 || len(whole) > 10 {
		return bad()
	}
	var v int64
	for _, c := range whole + frac + strings.Repeat("0", 6-len(frac)) {
		if c < '0' || c > '9' {
			return bad()
		}
		v = v*10 + int64(c-'0')
	}
	if v > maxPrice*priceScale {
		return bad()
	}
	return v
}

// usageCost parses cost: {usage: KIND}.
func (d *decoder) usageCost(n *yaml.Node, what string) usageKind {
	s, ok := d.str(n, what)
	if !ok {
		return usageNone
	}
	k, ok := usageKinds[s]
	if !ok {
		names := make([]string, 0, len(usageKinds))
		for name := range usageKinds {
			names = append(names, name)
		}
		sort.Strings(names)
		d.errorf(n, "%s: %q is not one of %s", what, clip(s), strings.Join(names, ", "))
		return usageNone
	}
	return k
}

// checkPrices notes whether a rule of s counts usage, and reports rules
// that count money without a price table.
func (d *decoder) checkPrices(s *Set, doc *yaml.Node) {
	for _, r := range s.rules {
		if r.cost.usage == usageNone {
			continue
		}
		s.usage = true
		if r.cost.usage == usageMoney && s.prices == nil {
			d.errorf(doc, "rule %q: cost: {usage: money} needs a price table in the file (prices: {unit: ..., models: {...}})", r.name)
		}
	}
}

// usageCosts sets the cost of the apps whose rule counts usage, and drops
// a token rule's app for a descriptor that gives another kind of tokens.
// Without usage in req or a descriptor, a rule's cost stays hits. A rule
// applies once per key: the costs of several descriptors that give tokens
// for one key are summed; otherwise the first descriptor's is kept.
func (s *Set) usageCosts(req *Request, hits int64, apps []applied) ([]applied, error) {
	out := apps[:0]
	summed := make(map[int]bool) // indexes in out of costs from descriptor tokens
	for _, a := range apps {
		k := a.r.cost.usage
		if k == usageNone {
			out = append(out, a)
			continue
		}
		fromTokens := false
		if _, ok := req.Descriptors[a.desc].Get("tokens"); ok && req.Usage.IsZero() {
			fromTokens = true
		}
		a, keep, err := s.usageCost(req, hits, a)
		if err != nil {
			return apps, err
		}
		if !keep {
			continue
		}
		dup := -1
		for j := range out {
			if out[j].r == a.r && out[j].key == a.key {
				dup = j
				break
			}
		}
		switch {
		case dup < 0:
			summed[len(out)] = fromTokens
			out = append(out, a)
		case fromTokens && summed[dup]:
			out[dup].cost = min(out[dup].cost+a.cost, maxLimit)
		}
	}
	return out, nil
}

// usageCost sets the cost of a, whose rule counts usage, from req's usage,
// else from its descriptor's model and tokens entries, else leaves hits;
// keep is false when the descriptor gives tokens the rule does not count.
func (s *Set) usageCost(req *Request, hits int64, a applied) (_ applied, keep bool, _ error) {
	k := a.r.cost.usage
	d := req.Descriptors[a.desc]
	model, hasModel := d.Get("model")
	tokens, hasTokens := d.Get("tokens")
	switch {
	case !req.Usage.IsZero():
		c, err := s.costOf(k, req.Usage)
		if err != nil {
			return a, false, err
		}
		a.cost = c
	case hasTokens:
		tk, ok := tokenKinds[tokens]
		if !ok {
			return a, false, fmt.Errorf("%w: descriptor %d: tokens=%q is not input, output or cached_input", ErrInvalidRequest, a.desc, clip(tokens))
		}
		if k != usageMoney && k != usageTokens && k != tk {
			return a, false, nil // another kind of tokens: this rule does not count them
		}
		if k != usageMoney {
			break // the hits are the tokens
		}
		if !hasModel {
			return a, false, fmt.Errorf("%w: descriptor %d: tokens=%s needs a model entry to be priced", ErrInvalidRequest, a.desc, tokens)
		}
		u := TokenUsage{Model: model}
		switch tk {
		case usageInput:
			u.InputTokens = hits
		case usageOutput:
			u.OutputTokens = hits
		default:
			u.CachedInputTokens = hits
		}
		c, err := s.costOf(k, u)
		if err != nil {
			return a, false, err
		}
		a.cost = c
	}
	return a, true, nil
}

// costOf returns what u costs under a rule that counts k: money at s's
// prices, rounded up, or tokens; at least 1 and at most maxLimit (a cost
// past any limit rejects all the same).
func (s *Set) costOf(k usageKind, u TokenUsage) (int64, error) {
	var c uint64
	switch k {
	case usageTokens:
		c = uint64(u.InputTokens) + uint64(u.OutputTokens) + uint64(u.CachedInputTokens)
	case usageInput:
		c = uint64(u.InputTokens)
	case usageOutput:
		c = uint64(u.OutputTokens)
	case usageCached:
		c = uint64(u.CachedInputTokens)
	case usageMoney:
		p, ok := s.prices.models[u.Model]
		if !ok {
			return 0, fmt.Errorf("%w: model %q has no price in the rule file (%s)", ErrInvalidRequest, clip(u.Model), s.priceList())
		}
		c = priced(u, p)
	}
	return int64(max(1, min(c, maxLimit))), nil
}

// priced returns ceil(sum of tokens × price / (priceScale × tokenScale)),
// exactly (128-bit), saturating at 2^63.
func priced(u TokenUsage, p modelPrice) uint64 {
	var hi, lo uint64
	for _, t := range [3][2]int64{{u.InputTokens, p.input}, {u.OutputTokens, p.output}, {u.CachedInputTokens, p.cached}} {
		h, l := bits.Mul64(uint64(t[0]), uint64(t[1]))
		var carry uint64
		lo, carry = bits.Add64(lo, l, 0)
		hi += h + carry
	}
	const div = priceScale * tokenScale
	if hi >= div {
		return 1 << 63
	}
	q, r := bits.Div64(hi, lo, div)
	if r > 0 {
		q++
	}
	return min(q, 1<<63)
}

// priceList names the priced models, for an error message.
func (s *Set) priceList() string {
	if s.prices == nil || len(s.prices.models) == 0 {
		return "it prices no model"
	}
	names := make([]string, 0, len(s.prices.models))
	for n := range s.prices.models {
		names = append(names, n)
	}
	sort.Strings(names)
	if len(names) > 8 {
		names = append(names[:8], "...")
	}
	return "it prices " + strings.Join(names, ", ")
}
