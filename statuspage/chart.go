package statuspage

import (
	"fmt"
	"strconv"
	"strings"
	"time"
)

// Chart geometry, in the SVG's own units (it scales to the page's width).
const (
	chartW = 600
	chartH = 140
)

// chart is one inline SVG line chart over the last hour.
type chart struct {
	ID, Title, Unit string
	Points          string // the polyline's points
	Max, Last       string // the y axis' top and the newest value
	Span            string // what the x axis covers
	W, H            int
	Samples         int
}

// charts draws throughput and lag from the history, the x axis ending now.
func charts(pts []point, now time.Time, span time.Duration) []chart {
	rate := make([]float64, len(pts))
	lag := make([]float64, len(pts))
	for i, p := range pts {
		rate[i], lag[i] = p.rate, float64(p.lag)
	}
	return []chart{
		draw("throughput", "Throughput", "records/s copied", pts, rate, now, span),
		draw("lag", "Lag", "records behind", pts, lag, now, span),
	}
}

// draw scales values (negative: no value) into a polyline.
func draw(id, title, unit string, pts []point, vals []float64, now time.Time, span time.Duration) chart {
	c := chart{ID: id, Title: title, Unit: unit, W: chartW, H: chartH, Max: "0", Last: "–",
		Span: "last " + duration(span)}
	top := 0.0
	for _, v := range vals {
		top = max(top, v)
	}
	scale := top
	if scale == 0 {
		scale = 1 // a flat line at the bottom
	}
	start := now.Add(-span)
	var b strings.Builder
	for i, p := range pts {
		v := vals[i]
		if v < 0 || p.at.Before(start) {
			continue
		}
		x := float64(chartW) * float64(p.at.Sub(start)) / float64(span)
		y := float64(chartH) - float64(chartH)*v/scale
		fmt.Fprintf(&b, "%.1f,%.1f ", min(x, chartW), y)
		c.Samples++
		c.Last = figure(v)
	}
	c.Points = strings.TrimSpace(b.String())
	c.Max = figure(top)
	return c
}

// figure prints a chart value: whole numbers as such, small rates with a decimal.
func figure(v float64) string {
	if v >= 100 || v == float64(int64(v)) {
		return strconv.FormatInt(int64(v+0.5), 10)
	}
	return strconv.FormatFloat(v, 'f', 1, 64)
}
