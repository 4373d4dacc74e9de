package heraldnats

import (
	"testing"

	"github.com/stretchr/testify/require"
)

func TestSubjectCoversAndOverlaps(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		filter, pattern  string
		covers, overlaps bool
	}{
		{"a.b", "a.b", true, true},
		{"a.*", "a.b", true, true},
		{"a.*", "a.*", true, true},
		{"a.*", "a.>", false, true},
		{"a.>", "a.b.c", true, true},
		{"a.>", "a.*", true, true},
		{"a.>", "a.>", true, true},
		{"a.>", "a", false, false},
		{">", "a", true, true},
		{"a.b", "a.*", false, true},
		{"a.b", "a.c", false, false},
		{"a.b", "a.b.c", false, false},
		{"a.*.c", "a.b.*", false, true},
		{"*.b", "a.>", false, true},
	} {
		require.Equal(t, tc.covers, subjectCovers(tc.filter, tc.pattern), "%s covers %s", tc.filter, tc.pattern)
		require.Equal(t, tc.overlaps, subjectsOverlap(tc.filter, tc.pattern), "%s overlaps %s", tc.filter, tc.pattern)
	}
}
