package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"time"

	"github.com/herald-outbox/herald"
	"github.com/herald-outbox/herald/heraldprom"
)

// adminServer serves /metrics, /healthz and /readyz for a running relay.
type adminServer struct {
	srv  *http.Server
	addr string // where it listens
	done chan struct{}
}

// checkAdminAddr refuses an --admin-addr that is not host:port.
func checkAdminAddr(inv *invocation, addr string) error {
	if addr == "" {
		return nil
	}
	if _, _, err := net.SplitHostPort(addr); err != nil {
		return usagef("%s: %q is not host:port (such as 127.0.0.1:9464)", inv.flags.label("admin-addr"), clean(addr))
	}
	return nil
}

// startAdmin listens on addr and serves the admin endpoints until stop.
func startAdmin(inv *invocation, log *slog.Logger, addr string, metrics *heraldprom.Metrics, relay *herald.Relay) (*adminServer, error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("admin server: %w", err)
	}
	mux := http.NewServeMux()
	mux.Handle("GET /metrics", metrics.Handler())
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		fmt.Fprintln(w, "ok")
	})
	mux.HandleFunc("GET /readyz", func(w http.ResponseWriter, _ *http.Request) {
		h := relay.Health()
		ready := h.Running && h.Database == "" && h.Destination == ""
		w.Header().Set("Content-Type", "application/json")
		if !ready {
			w.WriteHeader(http.StatusServiceUnavailable)
		}
		_ = json.NewEncoder(w).Encode(readyJSON{
			Ready: ready, Running: h.Running,
			Database: inv.stderr.scrub(h.Database), Destination: inv.stderr.scrub(h.Destination),
		})
	})
	a := &adminServer{
		srv:  &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second, ErrorLog: slog.NewLogLogger(log.Handler(), slog.LevelWarn)},
		addr: ln.Addr().String(),
		done: make(chan struct{}),
	}
	go func() {
		defer close(a.done)
		if err := a.srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			log.Error("admin server stopped", "error", err)
		}
	}()
	if host, _, _ := net.SplitHostPort(a.addr); !net.ParseIP(host).IsLoopback() {
		log.Warn("admin server listens beyond loopback", "addr", a.addr)
	}
	log.Info("admin server listening", "addr", a.addr, "endpoints", "/metrics /healthz /readyz")
	return a, nil
}

// readyJSON is the documented shape of /readyz.
type readyJSON struct {
	Ready       bool   `json:"ready"`
	Running     bool   `json:"running"`
	Database    string `json:"database_error,omitempty"`
	Destination string `json:"destination_error,omitempty"`
}

func (a *adminServer) stop() {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_ = a.srv.Shutdown(ctx)
	<-a.done
}
