// Package httpignored is httpposts checked with -http=false: nothing is
// reported.
package httpignored

import (
	"context"
	"net/http"
	"net/url"
	"strings"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

type service struct {
	pool   *pgxpool.Pool
	client *http.Client
}

func (s *service) webhookInTransaction(ctx context.Context) error {
	return pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		resp, err := http.Post("https://hooks.example.com/orders", "application/json", strings.NewReader("{}"))
		if err != nil {
			return err
		}
		return resp.Body.Close()
	})
}

func (s *service) formAfterCommit(ctx context.Context, tx pgx.Tx) error {
	if err := tx.Commit(ctx); err != nil {
		return err
	}
	resp, err := s.client.PostForm("https://hooks.example.com/orders", url.Values{})
	if err != nil {
		return err
	}
	return resp.Body.Close()
}

// A GET, or a Do whose method the call does not show: not reported.
func (s *service) readsInTransaction(ctx context.Context, tx pgx.Tx) error {
	resp, err := http.Get("https://rates.example.com/eur")
	if err != nil {
		return err
	}
	_ = resp.Body.Close()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, "https://hooks.example.com/orders", nil)
	if err != nil {
		return err
	}
	resp, err = s.client.Do(req)
	if err != nil {
		return err
	}
	return resp.Body.Close()
}

// A POST with no transaction: not reported.
func (s *service) postOnly() error {
	resp, err := s.client.Post("https://hooks.example.com/orders", "application/json", nil)
	if err != nil {
		return err
	}
	return resp.Body.Close()
}
