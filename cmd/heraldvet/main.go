// Command heraldvet reports dual writes and misused herald.Writer.WriteTx
// calls (see package heraldvet). Run it alone or through go vet:
//
//	heraldvet ./...
//	go vet -vettool=$(which heraldvet) ./...
package main

import (
	"golang.org/x/tools/go/analysis/singlechecker"

	"github.com/herald-outbox/herald/heraldvet"
)

func main() { singlechecker.Main(heraldvet.Analyzer) }
