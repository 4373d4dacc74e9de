package main

import (
	"flag"
	"strings"
)

// topCommands are the words herald takes first.
func topCommands() []string {
	names := []string{"help", "version"}
	seen := map[string]bool{}
	for _, c := range commands {
		word, _, _ := strings.Cut(c.name, " ")
		if !seen[word] {
			seen[word] = true
			names = append(names, word)
		}
	}
	return names
}

// didYouMean names the candidate closest to a mistyped word, as
// `did you mean "status"? `, when one is within two edits (one for words of
// up to four letters), and is empty otherwise.
func didYouMean(typed string, candidates ...string) string {
	if best := closest(typed, candidates); best != "" {
		return `did you mean "` + best + `"? `
	}
	return ""
}

// didYouMeanFlag is didYouMean for a mistyped flag name (without its
// dashes), among the flags of fs: `did you mean "--batch-size"? `.
func didYouMeanFlag(typed string, fs *flag.FlagSet) string {
	var names []string
	fs.VisitAll(func(f *flag.Flag) { names = append(names, f.Name) })
	if best := closest(typed, names); best != "" {
		return `did you mean "--` + best + `"? `
	}
	return ""
}

// closest is the candidate nearest to typed within two edits (one for
// words of up to four letters), or "".
func closest(typed string, candidates []string) string {
	typed = strings.ToLower(typed)
	best, bestDist := "", 3
	if len(typed) <= 4 {
		bestDist = 2
	}
	for _, c := range candidates {
		if d := editDistance(typed, c); d < bestDist {
			best, bestDist = c, d
		}
	}
	return best
}

// editDistance is the edit distance of a and b in which swapping two
// neighbours counts as one edit (optimal string alignment), counted in
// bytes: command names are ASCII.
func editDistance(a, b string) int {
	if len(a) > 64 || len(b) > 64 {
		return 64 // far from every command; and no large tables for long input
	}
	d := make([][]int, len(a)+1)
	for i := range d {
		d[i] = make([]int, len(b)+1)
		d[i][0] = i
	}
	for j := range d[0] {
		d[0][j] = j
	}
	for i := 1; i <= len(a); i++ {
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			d[i][j] = min(d[i-1][j]+1, d[i][j-1]+1, d[i-1][j-1]+cost)
			if i > 1 && j > 1 && a[i-1] == b[j-2] && a[i-2] == b[j-1] {
				d[i][j] = min(d[i][j], d[i-2][j-2]+1)
			}
		}
	}
	return d[len(a)][len(b)]
}
