// Package browsertest holds the end-to-end test of Herald's admin page
// (heraldui): headless Chromium, driven by chromedp, works the page mounted
// in a service's mux against a running relay. It is a module of its own so
// that chromedp is no requirement of Herald's.
//
// Run it from this directory with go test ./...; Chromium must be on PATH
// (Debian: apt-get install chromium). Without it the test skips, except
// with CI=true, where it fails. HERALD_SCREENSHOTS=1 saves the screenshots
// of docs/ (docs/admin-*.png).
package browsertest
