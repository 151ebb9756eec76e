package workflow

import (
	"bytes"
	_ "embed"
	"encoding/json"
	"fmt"
	"slices"
	"sort"
	"strconv"
	"strings"

	"gopkg.in/yaml.v3"

	"github.com/stockade-dev/stockade/tenants/errdefs"
	"github.com/stockade-dev/stockade/tenants/schema"
)

//go:embed schema.json
var schemaJSON []byte

// SchemaURL identifies the workflow schema.
const SchemaURL = "https://stockade.dev/schemas/workflow.json"

// Schema returns the JSON Schema of a workflow document.
func Schema() []byte { return bytes.Clone(schemaJSON) }

// MaxSourceBytes bounds a workflow's YAML.
const MaxSourceBytes = 64 << 10

// maxNodes bounds the YAML nodes walked, whatever their nesting.
const maxNodes = 20000

// Errors lists every failing field of a document. Each is a
// *errdefs.FieldError whose Field is a JSON pointer ("/steps/0/run") and
// whose Detail starts with the YAML line ("line 7: is required"). It wraps
// errdefs.ErrInvalid through each of them.
type Errors = schema.Errors

// Parser checks workflow YAML against the compiled schema.
type Parser struct {
	schema *schema.Schema
}

// NewParser compiles the schema.
func NewParser() (*Parser, error) {
	sch, err := schema.Compile(SchemaURL, schemaJSON)
	if err != nil {
		return nil, fmt.Errorf("workflow schema: %w", err)
	}
	return &Parser{schema: sch}, nil
}

// words say what is wrong in a workflow's terms.
var words = schema.Words{
	Unknown: func(name string) string { return fmt.Sprintf("%q is not a workflow setting here", name) },
	Pattern: patternDetail,
}

// lines maps JSON pointers of the document to their YAML line.
type lines map[string]int

// at is the line of ptr, or of its nearest ancestor that has one.
func (l lines) at(ptr string) int {
	for {
		if n, ok := l[ptr]; ok {
			return n
		}
		if ptr == "/" || ptr == "" {
			return 0
		}
		i := strings.LastIndexByte(ptr, '/')
		if i <= 0 {
			ptr = "/"
		} else {
			ptr = ptr[:i]
		}
	}
}

// Parse checks src (YAML) against the schema and the rules a schema cannot
// say well, and returns the definition. A failure is Errors naming every
// failing field with its line, sorted by line.
func (p *Parser) Parse(src []byte) (Definition, error) {
	if len(src) > MaxSourceBytes {
		return Definition{}, Errors{{Field: "/", Rule: "size", Detail: fmt.Sprintf("the workflow must be at most %d bytes", MaxSourceBytes)}}
	}
	var root yaml.Node
	if err := yaml.Unmarshal(src, &root); err != nil {
		return Definition{}, Errors{{Field: "/", Rule: "syntax", Detail: "not valid YAML: " + strings.TrimPrefix(err.Error(), "yaml: ")}}
	}
	if root.Kind == 0 || len(root.Content) == 0 {
		return Definition{}, Errors{{Field: "/", Rule: "required", Detail: "line 1: the workflow is empty"}}
	}
	ls := lines{}
	w := walker{lines: ls}
	inst, ferr := w.value(root.Content[0], "/")
	if ferr != nil {
		return Definition{}, Errors{ferr}
	}
	errs, err := p.schema.Check(inst, words)
	if err != nil {
		return Definition{}, fmt.Errorf("validate workflow: %w", err)
	}
	for _, e := range errs {
		e.Detail = fmt.Sprintf("line %d: %s", ls.at(e.Field), e.Detail)
	}
	if len(errs) > 0 {
		return Definition{}, sortErrors(errs, ls)
	}
	raw, err := json.Marshal(inst)
	if err != nil {
		return Definition{}, fmt.Errorf("encode workflow: %w", err)
	}
	var d Definition
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&d); err != nil {
		return Definition{}, Errors{{Field: "/", Rule: "syntax", Detail: err.Error()}}
	}
	if errs := d.crossCheck(ls); len(errs) > 0 {
		return Definition{}, sortErrors(errs, ls)
	}
	return d, nil
}

// walker turns YAML nodes into the JSON-like values the schema validates,
// noting each value's line.
type walker struct {
	lines lines
	nodes int
}

func (w *walker) fail(n *yaml.Node, ptr, rule, detail string) *errdefs.FieldError {
	return &errdefs.FieldError{Field: ptr, Rule: rule, Detail: fmt.Sprintf("line %d: %s", n.Line, detail)}
}

func (w *walker) value(n *yaml.Node, ptr string) (any, *errdefs.FieldError) {
	w.nodes++
	if w.nodes > maxNodes {
		return nil, w.fail(n, ptr, "size", "the workflow has too many values")
	}
	w.lines[ptr] = n.Line
	switch n.Kind {
	case yaml.AliasNode:
		// Aliases let a small document expand without bound; a workflow
		// is short enough to write out.
		return nil, w.fail(n, ptr, "syntax", "YAML anchors and aliases are not supported: write the value out")
	case yaml.MappingNode:
		m := make(map[string]any, len(n.Content)/2)
		for i := 0; i+1 < len(n.Content); i += 2 {
			k, v := n.Content[i], n.Content[i+1]
			if k.Kind != yaml.ScalarNode || k.Tag == "!!merge" {
				return nil, w.fail(k, ptr, "syntax", "keys must be plain names")
			}
			child := schema.Join(ptr, k.Value)
			if _, dup := m[k.Value]; dup {
				return nil, w.fail(k, child, "duplicate", fmt.Sprintf("%q appears twice", k.Value))
			}
			w.lines[child] = k.Line
			val, err := w.value(v, child)
			if err != nil {
				return nil, err
			}
			w.lines[child] = k.Line
			m[k.Value] = val
		}
		return m, nil
	case yaml.SequenceNode:
		out := make([]any, 0, len(n.Content))
		for i, c := range n.Content {
			val, err := w.value(c, schema.Join(ptr, strconv.Itoa(i)))
			if err != nil {
				return nil, err
			}
			out = append(out, val)
		}
		return out, nil
	case yaml.ScalarNode:
		switch n.ShortTag() {
		case "!!null":
			return nil, nil
		case "!!bool":
			var b bool
			if err := n.Decode(&b); err != nil {
				return nil, w.fail(n, ptr, "syntax", err.Error())
			}
			return b, nil
		case "!!int":
			var i int64
			if err := n.Decode(&i); err != nil {
				return nil, w.fail(n, ptr, "type", "the number is out of range")
			}
			return json.Number(strconv.FormatInt(i, 10)), nil
		case "!!float":
			var f float64
			if err := n.Decode(&f); err != nil {
				return nil, w.fail(n, ptr, "syntax", err.Error())
			}
			s := strconv.FormatFloat(f, 'g', -1, 64)
			if _, err := strconv.ParseFloat(s, 64); err != nil || strings.ContainsAny(s, "IN") {
				return nil, w.fail(n, ptr, "type", "must be a finite number")
			}
			return json.Number(s), nil
		case "!!str":
			return n.Value, nil
		}
		return nil, w.fail(n, ptr, "syntax", fmt.Sprintf("values of type %s are not supported", n.ShortTag()))
	}
	return nil, w.fail(n, ptr, "syntax", "unexpected YAML")
}

func sortErrors(errs Errors, ls lines) Errors {
	sort.SliceStable(errs, func(i, j int) bool {
		li, lj := ls.at(errs[i].Field), ls.at(errs[j].Field)
		if li != lj {
			return li < lj
		}
		return errs[i].Field < errs[j].Field
	})
	return errs
}

// patternDetail says in words what a pattern wants, by the field it is on.
func patternDetail(loc []string, got string) string {
	last, parent := "", ""
	if len(loc) > 0 {
		last = loc[len(loc)-1]
	}
	if len(loc) > 1 {
		parent = loc[len(loc)-2]
	}
	g := schema.Truncate(got)
	switch {
	case len(loc) == 1 && last == "name":
		return fmt.Sprintf("%q is not a workflow name: 1-63 lowercase letters, digits and '-', starting with a letter or digit", g)
	case strings.HasSuffix(last, "secret") || last == "secret" || parent == "env":
		return fmt.Sprintf("%q is not a secret name: A-Z, 0-9 and _, not starting with a digit", g)
	case parent == "repositories":
		return fmt.Sprintf("%q is not a repository: use owner/name or owner/*", g)
	case last == "command":
		return fmt.Sprintf("%q is not a command: start with '/', then lowercase words, e.g. /stockade run", g)
	case last == "site":
		return fmt.Sprintf("%q is not a Jira site: use https://your-site.atlassian.net", g)
	case last == "project":
		return fmt.Sprintf("%q is not a Jira project key: uppercase letters and digits, e.g. ENG", g)
	case last == "url":
		return fmt.Sprintf("%q is not an http(s) URL", g)
	case last == "channel":
		return fmt.Sprintf("%q is not a Slack channel: e.g. #builds or C0123456", g)
	case parent == "comment_authors":
		return fmt.Sprintf("%q is neither an author association (OWNER, MEMBER, COLLABORATOR, ...) nor a GitHub login", g)
	case last == "template":
		return fmt.Sprintf("%q is not a template name: lowercase letters, digits, '_', '-' and '.' (a built-in such as node, or one of the tenant's templates)", g)
	}
	return fmt.Sprintf("%q has the wrong form", g)
}

// crossCheck holds the rules between fields, said more plainly than a
// schema's "not" could.
func (d Definition) crossCheck(ls lines) Errors {
	var errs Errors
	bad := func(ptr, rule, detail string) {
		errs = append(errs, &errdefs.FieldError{Field: ptr, Rule: rule, Detail: fmt.Sprintf("line %d: %s", ls.at(ptr), detail)})
	}
	for i, t := range d.Triggers {
		base := fmt.Sprintf("/triggers/%d", i)
		if t.Event != EventPullRequest {
			if len(t.Actions) > 0 {
				bad(base+"/actions", "event", "actions apply to pull_request triggers only")
			}
			if len(t.Labels) > 0 {
				bad(base+"/labels", "event", "labels apply to pull_request triggers only")
			}
		}
		if t.Event != EventIssueComment && t.Command != "" {
			bad(base+"/command", "event", "a command applies to issue_comment triggers only")
		}
		if (t.Event == EventManual || t.Event == EventIssueComment) && len(t.Branches) > 0 {
			bad(base+"/branches", "event", "branches apply to push and pull_request triggers only")
		}
		if len(t.Labels) > 0 && !contains(t.Actions, "labeled") {
			bad(base+"/labels", "labels", "labels need the labeled action in actions")
		}
	}
	if d.AllowForks && !d.hasEvent(EventPullRequest) {
		bad("/allow_forks", "event", "allow_forks applies to pull_request triggers: the workflow has none")
	}
	if len(d.CommentAuthors) > 0 && !d.hasEvent(EventIssueComment) {
		bad("/comment_authors", "event", "comment_authors applies to issue_comment triggers: the workflow has none")
	}
	for i, a := range d.CommentAuthors {
		if isAssociationWord(a) && !slices.Contains(Associations, a) {
			bad(fmt.Sprintf("/comment_authors/%d", i), "association", fmt.Sprintf("%q is not an author association: use one of %s, or a GitHub login in lowercase",
				a, strings.Join(Associations, ", ")))
		}
	}
	seen := map[string]int{}
	for i, s := range d.Steps {
		if j, dup := seen[s.Name]; dup {
			bad(fmt.Sprintf("/steps/%d/name", i), "duplicate", fmt.Sprintf("step %d is already called %q", j+1, s.Name))
		}
		seen[s.Name] = i
		if s.TimeoutSeconds > d.Timeout() {
			bad(fmt.Sprintf("/steps/%d/timeout_seconds", i), "max", fmt.Sprintf("must be at most the workflow's timeout (%d)", d.Timeout()))
		}
	}
	for i, a := range d.Artifacts {
		if hasDotDot(a) {
			bad(fmt.Sprintf("/artifacts/%d", i), "path", fmt.Sprintf("%q climbs out with '..': artifacts are paths in the sandbox", schema.Truncate(a)))
		}
	}
	if s := d.Notify.Slack; s != nil {
		switch {
		case s.WebhookURLSecret == "" && s.BotTokenSecret == "":
			bad("/notify/slack", "required", "name webhook_url_secret, or bot_token_secret with channel")
		case s.WebhookURLSecret != "" && s.BotTokenSecret != "":
			bad("/notify/slack/bot_token_secret", "exclusive", "use webhook_url_secret or bot_token_secret, not both")
		case s.BotTokenSecret != "" && s.Channel == "":
			bad("/notify/slack/channel", "required", "a bot token needs a channel")
		}
	}
	return errs
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

func hasDotDot(p string) bool {
	for _, part := range strings.Split(p, "/") {
		if part == ".." {
			return true
		}
	}
	return false
}
