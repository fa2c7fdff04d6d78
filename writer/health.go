package writer

import (
	"encoding/json"
	"net/http"
	"strconv"
)

// ready serves GET /readyz from the flags cache (flags.go), never with a
// read of its own: a flood of unauthenticated /readyz requests costs at most
// one GetItem of the flags item per --flags-ttl (one per second while the
// table does not answer), the same reads the write path makes anyway, so it
// cannot throttle the one item every write depends on. 200 when the last
// read of the flags answered (writesEnabled as it said), 503 when it failed
// or while draining.
func (s *Server) ready(w http.ResponseWriter, r *http.Request) {
	if s.draining.Load() {
		writeJSON(w, http.StatusServiceUnavailable, map[string]string{"status": "draining"})
		return
	}
	f, err := s.flags.get(r.Context())
	if err != nil {
		s.cfg.Logger.Warn("readiness: table unreachable", "table", s.cfg.Table, "err", err)
		writeJSON(w, http.StatusServiceUnavailable, map[string]string{"status": "table unreachable"})
		return
	}
	writeJSON(w, http.StatusOK, map[string]json.RawMessage{
		"status":        json.RawMessage(`"ready"`),
		"writesEnabled": json.RawMessage(strconv.FormatBool(f.WritesEnabled())),
	})
}
