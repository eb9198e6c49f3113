package main

import (
	"bufio"
	"bytes"
	"encoding/json"
	"io"
	"net/http"
)

// maxEventLine bounds one line of a streamed answer.
const maxEventLine = 1 << 20

// request is what the proxy reads of an OpenAI-style request body.
type request struct {
	// Model is the body's "model", or empty.
	Model string
	// Stream reports "stream": true: the answer is a server-sent event stream.
	Stream bool
	// AskedUsage reports that the client itself set
	// stream_options.include_usage; when it did not, the proxy asks for
	// the usage chunk and keeps it from the client.
	AskedUsage bool
	// Body is the body to forward.
	Body []byte
}

// readRequest reads the model and streaming options of body and, for a
// streamed answer, makes sure the upstream is asked to end the stream with
// the usage (stream_options.include_usage). A body that is not a JSON
// object is forwarded as it is.
func readRequest(body []byte) request {
	r := request{Body: body}
	var fields map[string]json.RawMessage
	if json.Unmarshal(body, &fields) != nil {
		return r
	}
	json.Unmarshal(fields["model"], &r.Model)
	json.Unmarshal(fields["stream"], &r.Stream)
	if !r.Stream {
		return r
	}
	opts := map[string]json.RawMessage{}
	json.Unmarshal(fields["stream_options"], &opts)
	json.Unmarshal(opts["include_usage"], &r.AskedUsage)
	if r.AskedUsage {
		return r
	}
	opts["include_usage"] = json.RawMessage("true")
	fields["stream_options"], _ = json.Marshal(opts)
	if out, err := json.Marshal(fields); err == nil {
		r.Body = out
	}
	return r
}

// chunk is what the proxy reads of one answer or streamed chunk.
type chunk struct {
	Choices []json.RawMessage `json:"choices"`
	Usage   *struct {
		// Chat completions name them prompt and completion tokens; the
		// Responses API and others, input and output tokens.
		PromptTokens     int64 `json:"prompt_tokens"`
		CompletionTokens int64 `json:"completion_tokens"`
		InputTokens      int64 `json:"input_tokens"`
		OutputTokens     int64 `json:"output_tokens"`
		TotalTokens      int64 `json:"total_tokens"`
	} `json:"usage"`
}

// usage returns the usage data carries, if it is a JSON object with one.
func usage(data []byte) (Usage, bool) {
	var c chunk
	if json.Unmarshal(data, &c) != nil {
		return Usage{}, false
	}
	return c.usage()
}

// usage returns the chunk's usage, if it has one.
func (c *chunk) usage() (Usage, bool) {
	if c.Usage == nil {
		return Usage{}, false
	}
	u := Usage{
		Input:  c.Usage.PromptTokens + c.Usage.InputTokens,
		Output: c.Usage.CompletionTokens + c.Usage.OutputTokens,
		Total:  c.Usage.TotalTokens,
	}
	if u.Total == 0 {
		u.Total = u.Input + u.Output
	}
	return u, true
}

// streamed is what relaying a stream learned.
type streamed struct {
	// Usage is the stream's usage chunk, when Reported.
	Usage    Usage
	Reported bool
	// Chunks counts the chunks with choices: an estimate of the output
	// tokens when the stream ends without its usage (about a token each).
	Chunks int64
}

// relay copies a server-sent event stream to w event by event, flushing
// each, and reads the usage from it. With hideUsage, the usage-only chunk
// (no choices) the proxy asked for is not passed on. When a write to w
// fails (the client left), relay reads the rest of the stream without
// writing, for its usage, and returns the write's error at the end.
func relay(w http.ResponseWriter, body io.Reader, hideUsage bool) (streamed, error) {
	var s streamed
	var writeErr error
	flusher, _ := w.(http.Flusher)
	sc := bufio.NewScanner(body)
	sc.Buffer(make([]byte, 0, 64<<10), maxEventLine)
	var event bytes.Buffer
	keep := true
	for sc.Scan() {
		line := sc.Bytes()
		if len(line) > 0 {
			if data, ok := bytes.CutPrefix(line, []byte("data:")); ok {
				keep = keep && s.read(bytes.TrimSpace(data), hideUsage)
			}
			event.Write(line)
			event.WriteByte('\n')
			continue
		}
		if keep && event.Len() > 0 && writeErr == nil {
			event.WriteByte('\n')
			if _, writeErr = w.Write(event.Bytes()); writeErr == nil && flusher != nil {
				flusher.Flush()
			}
		}
		event.Reset()
		keep = true
	}
	if keep && event.Len() > 0 && writeErr == nil {
		_, writeErr = w.Write(event.Bytes())
	}
	if err := sc.Err(); err != nil {
		return s, err
	}
	return s, writeErr
}

// read takes one data field of an event into s and reports whether the
// event is to be passed on.
func (s *streamed) read(data []byte, hideUsage bool) bool {
	if len(data) == 0 || data[0] != '{' {
		return true // "[DONE]" and anything that is not a chunk
	}
	var c chunk
	if json.Unmarshal(data, &c) != nil {
		return true
	}
	if len(c.Choices) > 0 {
		s.Chunks++
	}
	if u, ok := c.usage(); ok {
		s.Usage, s.Reported = u, true
		return !(hideUsage && len(c.Choices) == 0)
	}
	return true
}
