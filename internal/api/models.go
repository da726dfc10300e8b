package api

import (
	"net/http"
	"strings"
	"time"

	"github.com/relaybatch/relay/internal/auth"
	"github.com/relaybatch/relay/internal/errs"
)

// The model objects of GET /v1/models and /v1/models/{id} (docs/api.md
// "Overview"): in Anthropic's shape when the request carries
// anthropic-version (the Anthropic SDKs send it), else in OpenAI's. A model
// has no creation time here; since is when the API started.
type (
	openAIModel struct {
		ID      string `json:"id"`
		Object  string `json:"object"`
		Created int64  `json:"created"`
		OwnedBy string `json:"owned_by"`
	}
	anthropicModel struct {
		Type        string `json:"type"`
		ID          string `json:"id"`
		DisplayName string `json:"display_name"`
		CreatedAt   string `json:"created_at"`
	}
)

func modelObject(r *http.Request, name string, since time.Time) any {
	if fromAnthropic(r) {
		return anthropicModel{Type: "model", ID: name, DisplayName: name, CreatedAt: since.UTC().Format(time.RFC3339)}
	}
	return openAIModel{ID: name, Object: "model", Created: since.Unix(), OwnedBy: "relay"}
}

// fromAnthropic tells a request of an Anthropic SDK on a route both SDKs
// call: they send anthropic-version, the OpenAI SDKs do not.
func fromAnthropic(r *http.Request) bool {
	return r.Header.Get("anthropic-version") != ""
}

// listModels answers GET /v1/models with the configured models, in file order.
func (a *API) listModels(since time.Time) handlerFunc {
	return func(w http.ResponseWriter, r *http.Request, _ auth.Principal) error {
		names := a.Batches.Models.Names()
		data := make([]any, len(names))
		for i, n := range names {
			data[i] = modelObject(r, n, since)
		}
		if !fromAnthropic(r) {
			return writeJSON(w, http.StatusOK, map[string]any{"object": "list", "data": data})
		}
		page := map[string]any{"data": data, "has_more": false, "first_id": nil, "last_id": nil}
		if len(names) > 0 {
			page["first_id"], page["last_id"] = names[0], names[len(names)-1]
		}
		return writeJSON(w, http.StatusOK, page)
	}
}

// getModel answers GET /v1/models/{id}: a configured model the key may
// use, else 404 as OpenAI answers a model that does not exist or that the
// caller may not use (code model_not_found), one answer for both.
func (a *API) getModel(since time.Time) handlerFunc {
	return func(w http.ResponseWriter, r *http.Request, p auth.Principal) error {
		id := r.PathValue("id")
		if _, ok := a.Batches.Models.Lookup(id); !ok || !p.MayUse(id) {
			return errs.E(errs.NotFound, "model_not_found", "", "The model %q does not exist or you do not have access to it.", errs.Clip([]byte(id)))
		}
		return writeJSON(w, http.StatusOK, modelObject(r, id, since))
	}
}

// anthropicShaped tells whether r's errors take Anthropic's envelope: the
// Message Batches routes always, the models routes for an Anthropic SDK.
func anthropicShaped(r *http.Request) bool {
	p := r.URL.Path
	return strings.HasPrefix(p, "/v1/messages") ||
		(p == "/v1/models" || strings.HasPrefix(p, "/v1/models/")) && fromAnthropic(r)
}
