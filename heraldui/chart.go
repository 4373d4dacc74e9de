package heraldui

import (
	"fmt"
	"math"
	"strconv"
	"time"
)

// chart is a bar chart of one figure per minute, laid out on the server so
// that the page's script only draws what it is given: the same layout
// serves the first render and every live refresh.
type chart struct {
	ID     string  `json:"id"`
	Title  string  `json:"title"`
	Unit   string  `json:"unit"`    // what the y axis counts, such as "events / minute"
	Width  int     `json:"width"`   // of the viewBox
	Height int     `json:"height"`  // of the viewBox
	Left   int     `json:"left"`    // x of the y axis
	Bottom int     `json:"bottom"`  // y of the x axis
	Bars   []bar   `json:"bars"`    // oldest minute first
	YTicks []tick  `json:"y_ticks"` // from 0 up
	XTicks []tick  `json:"x_ticks"` // times, oldest first
	Total  float64 `json:"total"`   // the sum (counts) or the largest value (ages)
	Last   string  `json:"last"`    // the last minute's value, as shown
	Empty  bool    `json:"empty"`   // no minute recorded yet
}

type bar struct {
	X     int    `json:"x"`
	Y     int    `json:"y"`
	W     int    `json:"w"`
	H     int    `json:"h"`
	Label string `json:"label"` // the minute and its value, for the tooltip
}

type tick struct {
	At    int    `json:"at"` // y for the y axis, x for the x axis
	Label string `json:"label"`
}

// The chart's frame, in viewBox units.
const (
	chartWidth  = 320
	chartHeight = 170
	chartLeft   = 44 // room for the y labels
	chartRight  = 8
	chartTop    = 10
	chartBottom = 150 // the x axis; the time labels go below it
)

// newChart lays out values (one a minute, at minutes) on a scale from 0 to
// a round maximum, with three y ticks labelled by format and up to six
// time ticks.
func newChart(id, title, unit string, minutes []time.Time, values []float64, format func(float64) string) chart {
	c := chart{ID: id, Title: title, Unit: unit, Width: chartWidth, Height: chartHeight, Left: chartLeft, Bottom: chartBottom,
		Empty: len(values) == 0}
	peak := 0.0
	for _, v := range values {
		peak = max(peak, v)
	}
	top := niceCeil(peak)
	plotH := float64(chartBottom - chartTop)
	for _, f := range []float64{0, 0.5, 1} {
		c.YTicks = append(c.YTicks, tick{At: chartBottom - int(math.Round(f*plotH)), Label: format(f * top)})
	}
	if len(values) == 0 {
		return c
	}
	c.Last = format(values[len(values)-1])
	slot := float64(chartWidth-chartLeft-chartRight) / float64(len(values))
	every := max(1, (len(values)+5)/6)
	for i, v := range values {
		h := int(math.Round(v / top * plotH))
		if v > 0 {
			h = max(h, 2) // a minute with anything shows
		}
		x := chartLeft + int(math.Round(float64(i)*slot))
		c.Bars = append(c.Bars, bar{
			X: x + 1, Y: chartBottom - h, W: max(int(slot)-2, 1), H: h,
			Label: fmt.Sprintf("%s: %s", minutes[i].UTC().Format("15:04 UTC"), format(v)),
		})
		if (len(values)-1-i)%every == 0 {
			c.XTicks = append(c.XTicks, tick{At: x + int(slot/2), Label: minutes[i].UTC().Format("15:04")})
		}
	}
	return c
}

// niceCeil rounds v up to 1, 2 or 5 times a power of ten; 1 for 0, so that
// an empty chart still has a scale.
func niceCeil(v float64) float64 {
	if v <= 1 {
		return 1
	}
	p := math.Pow(10, math.Floor(math.Log10(v)))
	for _, m := range []float64{1, 2, 5, 10} {
		if v <= m*p {
			return m * p
		}
	}
	return 10 * p
}

// charts are the overview's three charts: throughput, failures and the
// oldest pending age, a minute a bar.
func charts(points []RatePoint) []chart {
	minutes := make([]time.Time, len(points))
	published := make([]float64, len(points))
	failed := make([]float64, len(points))
	oldest := make([]float64, len(points))
	for i, p := range points {
		minutes[i] = p.Minute
		published[i], failed[i], oldest[i] = float64(p.Published), float64(p.Failed), p.OldestPending.Seconds()
	}
	count := func(v float64) string { return strconv.FormatFloat(v, 'f', -1, 64) }
	seconds := func(v float64) string {
		switch {
		case v == 0:
			return "0"
		case v < 60:
			return strconv.FormatFloat(math.Round(v*10)/10, 'f', -1, 64) + "s"
		}
		return age(time.Duration(v * float64(time.Second)))
	}
	th := newChart("chart-throughput", "Throughput", "events published / minute", minutes, published, count)
	fa := newChart("chart-failures", "Failures", "failed attempts / minute", minutes, failed, count)
	ol := newChart("chart-oldest", "Oldest pending", "age of the oldest waiting event", minutes, oldest, seconds)
	for _, v := range published {
		th.Total += v
	}
	for _, v := range failed {
		fa.Total += v
	}
	for _, v := range oldest {
		ol.Total = max(ol.Total, v)
	}
	return []chart{th, fa, ol}
}
