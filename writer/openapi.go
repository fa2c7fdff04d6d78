package writer

import (
	_ "embed"
	"encoding/json"
	"fmt"
	"net/http"
	"sync"

	"go.yaml.in/yaml/v3"
)

// openAPIYAML is the writer's OpenAPI 3.1 document (openapi.yaml): the one
// source of the machine-readable contract. docs/openapi.yaml links to it,
// ledgerctl's client is generated from it, and the package's tests validate
// every exchange against it.
//
//go:embed openapi.yaml
var openAPIYAML []byte

// OpenAPI returns the OpenAPI document as JSON, converted from the embedded
// YAML once. The error is that of a malformed document (a bug caught by the
// tests).
var OpenAPI = sync.OnceValues(func() ([]byte, error) {
	var doc any
	if err := yaml.Unmarshal(openAPIYAML, &doc); err != nil {
		return nil, fmt.Errorf("openapi.yaml: %w", err)
	}
	doc, err := jsonValue(doc)
	if err != nil {
		return nil, fmt.Errorf("openapi.yaml: %w", err)
	}
	out, err := json.Marshal(doc)
	if err != nil {
		return nil, fmt.Errorf("openapi.yaml: %w", err)
	}
	return out, nil
})

// jsonValue makes a decoded YAML value encodable as JSON: every mapping
// key must be a string (quote numeric keys such as status codes).
func jsonValue(v any) (any, error) {
	switch v := v.(type) {
	case map[string]any:
		for k, el := range v {
			el, err := jsonValue(el)
			if err != nil {
				return nil, fmt.Errorf("%s: %w", k, err)
			}
			v[k] = el
		}
		return v, nil
	case map[any]any:
		return nil, fmt.Errorf("a mapping with a key that is not a string")
	case []any:
		for i, el := range v {
			el, err := jsonValue(el)
			if err != nil {
				return nil, fmt.Errorf("[%d]: %w", i, err)
			}
			v[i] = el
		}
		return v, nil
	}
	return v, nil
}

// openAPI serves GET /v1/openapi.json: the document, without a token.
func (s *Server) openAPI(w http.ResponseWriter, _ *http.Request) {
	doc, err := OpenAPI()
	if err != nil { // New refuses to start with a malformed document
		problem(http.StatusInternalServerError, ProblemInternal, "internal error").write(w)
		return
	}
	response{status: http.StatusOK, body: doc}.write(w, false)
}
