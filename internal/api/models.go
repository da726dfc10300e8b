package api

import (
	"net/http"
	"time"

	"github.com/relaybatch/relay/internal/auth"
)

// listModels answers GET /v1/models with the configured models (docs/api.md
// "Overview"): in Anthropic's list shape when the request carries
// anthropic-version (the Anthropic SDKs send it), else in OpenAI's. A model
// has no creation time here; since is when the API started.
func (a *API) listModels(since time.Time) handlerFunc {
	return func(w http.ResponseWriter, r *http.Request, _ auth.Principal) error {
		names := a.Batches.Engine.Models.Names()
		if r.Header.Get("anthropic-version") != "" {
			type model struct {
				Type        string `json:"type"`
				ID          string `json:"id"`
				DisplayName string `json:"display_name"`
				CreatedAt   string `json:"created_at"`
			}
			data := make([]model, len(names))
			for i, n := range names {
				data[i] = model{Type: "model", ID: n, DisplayName: n, CreatedAt: since.UTC().Format(time.RFC3339)}
			}
			page := map[string]any{"data": data, "has_more": false, "first_id": nil, "last_id": nil}
			if len(names) > 0 {
				page["first_id"], page["last_id"] = names[0], names[len(names)-1]
			}
			return writeJSON(w, http.StatusOK, page)
		}
		type model struct {
			ID      string `json:"id"`
			Object  string `json:"object"`
			Created int64  `json:"created"`
			OwnedBy string `json:"owned_by"`
		}
		data := make([]model, len(names))
		for i, n := range names {
			data[i] = model{ID: n, Object: "model", Created: since.Unix(), OwnedBy: "relay"}
		}
		return writeJSON(w, http.StatusOK, map[string]any{"object": "list", "data": data})
	}
}
