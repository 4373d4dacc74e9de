package heraldui_test

import (
	"context"
	"crypto/subtle"
	"fmt"
	"log"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"

	"github.com/herald-outbox/herald/driver/heraldsqlite"
	"github.com/herald-outbox/herald/heraldui"
)

// A service serves the operator page of its outbox in its own server,
// under /herald/, behind its own authentication: the page's own login is
// off (ExternalAuth), and whoever the service's middleware lets through may
// act. The store is SQLite here; a PostgreSQL service passes heraldpg.New's.
func Example() {
	dir, err := os.MkdirTemp("", "heraldui-example-")
	if err != nil {
		log.Fatal(err)
	}
	defer os.RemoveAll(dir)
	db, err := heraldsqlite.Open(filepath.Join(dir, "shop.db"))
	if err != nil {
		log.Fatal(err)
	}
	defer db.Close()
	store, err := heraldsqlite.New(db, nil)
	if err != nil {
		log.Fatal(err)
	}
	if err := store.Migrate(context.Background()); err != nil {
		log.Fatal(err)
	}
	// The service's own credential for its operators (from its secrets).
	operatorKey := "an-operator-key-of-the-service"

	page, err := heraldui.New(heraldui.Config{
		Admin:        store,
		Prefix:       "/herald",
		ExternalAuth: true, // operatorsOnly decides who may act
	})
	if err != nil {
		log.Fatal(err)
	}
	// operatorsOnly stands for the service's own authentication
	// middleware: its single sign-on, its session check, its roles.
	operatorsOnly := func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			want := "Bearer " + operatorKey
			if subtle.ConstantTimeCompare([]byte(r.Header.Get("Authorization")), []byte(want)) != 1 {
				http.Error(w, "operators only", http.StatusUnauthorized)
				return
			}
			next.ServeHTTP(w, r)
		})
	}
	mux := http.NewServeMux()
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) { fmt.Fprintln(w, "ok") })
	mux.Handle("/herald/", operatorsOnly(page))

	// The service serves mux (http.ListenAndServe); a test server here.
	srv := httptest.NewServer(mux)
	defer srv.Close()
	for _, key := range []string{"", operatorKey} {
		req, err := http.NewRequest(http.MethodGet, srv.URL+"/herald/", nil)
		if err != nil {
			log.Fatal(err)
		}
		if key != "" {
			req.Header.Set("Authorization", "Bearer "+key)
		}
		res, err := http.DefaultClient.Do(req)
		if err != nil {
			log.Fatal(err)
		}
		res.Body.Close()
		fmt.Println("GET /herald/:", res.Status)
	}
	// Output:
	// GET /herald/: 401 Unauthorized
	// GET /herald/: 200 OK
}
