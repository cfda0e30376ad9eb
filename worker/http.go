package worker

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"time"

	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// endpoint is the HTTP server on METRICS_ADDR; nil when it is off.
type endpoint struct{ srv *http.Server }

// listen starts serving /metrics, /healthz, /readyz and /locks on
// METRICS_ADDR, unless it is off.
func (w *Worker) listen() (*endpoint, error) {
	if w.cfg.MetricsAddr == "" {
		return nil, nil
	}
	ln, err := net.Listen("tcp", w.cfg.MetricsAddr)
	if err != nil {
		return nil, fmt.Errorf("worker: METRICS_ADDR %s: %w", w.cfg.MetricsAddr, err)
	}
	w.addr.Store(ln.Addr().String())
	ep := &endpoint{srv: &http.Server{Handler: w.httpHandler(), ReadHeaderTimeout: 5 * time.Second}}
	go func() {
		if err := ep.srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			w.log.Error("metrics endpoint stopped", "err", err)
		}
	}()
	return ep, nil
}

// close stops the endpoint at once (the worker could not start).
func (ep *endpoint) close() {
	if ep != nil {
		_ = ep.srv.Close()
	}
}

// shutdown stops the endpoint after its requests in flight, within 5s.
func (ep *endpoint) shutdown() {
	if ep == nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_ = ep.srv.Shutdown(ctx)
}

func (w *Worker) httpHandler() http.Handler {
	mux := http.NewServeMux()
	mux.Handle("/metrics", promhttp.HandlerFor(w.reg, promhttp.HandlerOpts{}))
	mux.HandleFunc("/healthz", func(rw http.ResponseWriter, _ *http.Request) {
		rw.WriteHeader(http.StatusOK)
		_, _ = rw.Write([]byte("ok\n"))
	})
	mux.HandleFunc("/readyz", func(rw http.ResponseWriter, _ *http.Request) {
		ready, body := w.health.readyz(w.stopping.Load())
		rw.Header().Set("Content-Type", "text/plain; charset=utf-8")
		if !ready {
			rw.WriteHeader(http.StatusServiceUnavailable)
		}
		_, _ = rw.Write([]byte(body + "\n"))
	})
	return w.lockRoutes(mux)
}
