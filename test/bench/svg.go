package bench

import (
	"fmt"
	"html"
	"io"
	"math"
	"strconv"
	"strings"
	"time"
)

// Chart geometry, in pixels.
const (
	svgWidth  = 980
	svgHeight = 820
	plotLeft  = 80
	plotRight = svgWidth - 20
	plotWidth = plotRight - plotLeft
	panelH    = 260
)

var contenderColor = map[Contender]string{
	Ceiling:        "#7f7f7f",
	Walbox:         "#1f77b4",
	WalboxBaseline: "#aec7e8",
	Poll100ms:      "#ff7f0e",
	Poll1s:         "#d62728",
	Ceiling3:       "#c7c7c7",
	Walbox3:        "#17becf",
	WalboxStream:   "#2ca02c",
}

// percentile shades: p50, p99, p99.9.
var shades = []float64{1, 0.6, 0.3}

// SVG draws the chart: drain throughput per scenario and contender, and steady end-to-end
// latency percentiles (p50, p99, p99.9) per scenario and contender on a log scale.
func (rep *Report) SVG(w io.Writer) {
	c := &canvas{w: w}
	c.p(`<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" viewBox="0 0 %d %d" font-family="sans-serif" font-size="12">`+"\n",
		svgWidth, svgHeight, svgWidth, svgHeight)
	c.p(`<rect width="100%%" height="100%%" fill="white"/>` + "\n")
	rep.throughputPanel(c, 50)
	rep.latencyPanel(c, 440)
	c.legend(svgHeight-40, rep.contenders())
	c.p("</svg>\n")
}

type canvas struct{ w io.Writer }

func (c *canvas) p(format string, args ...any) { fmt.Fprintf(c.w, format, args...) }

func (c *canvas) text(x, y float64, anchor, style, s string) {
	c.p(`<text x="%.1f" y="%.1f" text-anchor="%s" %s>%s</text>`+"\n", x, y, anchor, style, html.EscapeString(s))
}

func (c *canvas) line(x1, y1, x2, y2 float64, stroke string) {
	c.p(`<line x1="%.1f" y1="%.1f" x2="%.1f" y2="%.1f" stroke="%s"/>`+"\n", x1, y1, x2, y2, stroke)
}

func (c *canvas) bar(x, y, w, h float64, fill string, opacity float64, title string) {
	c.p(`<rect x="%.1f" y="%.1f" width="%.1f" height="%.1f" fill="%s" fill-opacity="%.2f"><title>%s</title></rect>`+"\n",
		x, y, w, max(h, 0.5), fill, opacity, html.EscapeString(title))
}

// groupLabel writes a scenario name under its group, one comma-separated part per line.
func (c *canvas) groupLabel(x, y float64, name string) {
	for i, part := range strings.Split(name, ", ") {
		c.text(x, y+float64(i)*14, "middle", `fill="#333"`, part)
	}
}

func (rep *Report) throughputPanel(c *canvas, top float64) {
	scs := rep.scenarios(Drain)
	bottom := top + panelH
	c.text(svgWidth/2, top-20, "middle", `font-size="15" font-weight="bold"`, "Drain throughput (messages/s, higher is better)")
	peak := 0.0
	for _, r := range rep.Results {
		if r.Scenario.Kind == Drain && r.Err == "" {
			peak = math.Max(peak, r.Throughput)
		}
	}
	if len(scs) == 0 || peak == 0 {
		c.text(svgWidth/2, top+panelH/2, "middle", "", "no drain results")
		return
	}
	step := niceStep(peak / 5)
	ymax := math.Ceil(peak/step) * step
	y := func(v float64) float64 { return bottom - v/ymax*panelH }
	for v := 0.0; v <= ymax+step/2; v += step {
		c.line(plotLeft, y(v), plotRight, y(v), "#e5e5e5")
		c.text(plotLeft-6, y(v)+4, "end", `fill="#555"`, short(v))
	}
	gw, whos := float64(plotWidth)/float64(len(scs)), rep.contenders()
	for i, sc := range scs {
		x0 := plotLeft + float64(i)*gw
		bw := gw / float64(len(whos)+1)
		for j, who := range whos {
			r, ok := rep.find(sc.Name, who)
			if !ok {
				continue
			}
			x := x0 + bw/2 + float64(j)*bw
			c.bar(x, y(r.Throughput), bw*0.9, bottom-y(r.Throughput), contenderColor[who], 1,
				fmt.Sprintf("%s, %s: %.0f msg/s", sc.Name, who, r.Throughput))
			c.text(x+bw*0.45, y(r.Throughput)-3, "middle", `font-size="10" fill="#333"`, short(r.Throughput))
		}
		c.groupLabel(x0+gw/2, bottom+16, sc.Name)
	}
	c.line(plotLeft, bottom, plotRight, bottom, "#333")
}

func (rep *Report) latencyPanel(c *canvas, top float64) {
	scs := rep.scenarios(Steady)
	bottom := top + panelH
	c.text(svgWidth/2, top-20, "middle", `font-size="15" font-weight="bold"`,
		"Steady end-to-end latency, commit to consumer (p50, p99, p99.9; log scale, lower is better)")
	if len(scs) == 0 {
		c.text(svgWidth/2, top+panelH/2, "middle", "", "no steady results")
		return
	}
	lo, hi := -1.0, 1.0 // log10 of milliseconds: 0.1 ms to 10 s at least
	for _, r := range rep.Results {
		if r.Latency != nil && r.Err == "" {
			lo = math.Min(lo, math.Floor(math.Log10(math.Max(msOf(r.Latency.P50), 1e-3))))
			hi = math.Max(hi, math.Ceil(math.Log10(math.Max(msOf(r.Latency.P999), 1e-3))))
		}
	}
	y := func(v float64) float64 {
		return bottom - (math.Log10(math.Max(v, math.Pow(10, lo)))-lo)/(hi-lo)*panelH
	}
	for e := lo; e <= hi; e++ {
		v := math.Pow(10, e)
		c.line(plotLeft, y(v), plotRight, y(v), "#e5e5e5")
		c.text(plotLeft-6, y(v)+4, "end", `fill="#555"`, decade(v))
	}
	gw, whos := float64(plotWidth)/float64(len(scs)), rep.contenders()
	for i, sc := range scs {
		x0 := plotLeft + float64(i)*gw
		cw := gw / float64(len(whos)+1)
		for j, who := range whos {
			r, ok := rep.find(sc.Name, who)
			if !ok || r.Latency == nil {
				continue
			}
			bw := cw * 0.9 / 3
			for k, d := range []time.Duration{r.Latency.P50, r.Latency.P99, r.Latency.P999} {
				x := x0 + cw/2 + float64(j)*cw + float64(k)*bw
				c.bar(x, y(msOf(d)), bw, bottom-y(msOf(d)), contenderColor[who], shades[k],
					fmt.Sprintf("%s, %s, %s: %s", sc.Name, who, []string{"p50", "p99", "p99.9"}[k], ms(d)))
			}
		}
		c.groupLabel(x0+gw/2, bottom+16, sc.Name)
	}
	c.line(plotLeft, bottom, plotRight, bottom, "#333")
}

func (c *canvas) legend(y float64, whos []Contender) {
	x := float64(plotLeft)
	for _, who := range whos {
		c.bar(x, y-10, 14, 14, contenderColor[who], 1, string(who))
		c.text(x+20, y+2, "start", "", string(who))
		x += 150
	}
	x += 20
	for k, name := range []string{"p50", "p99", "p99.9"} {
		c.bar(x, y-10, 14, 14, "#444", shades[k], name)
		c.text(x+20, y+2, "start", "", name)
		x += 70
	}
}

// decade labels a power of ten of milliseconds: 0.1 ms, 1 ms, ..., 1 s, 10 s.
func decade(msec float64) string {
	if msec >= 1000 {
		return strconv.FormatFloat(msec/1000, 'f', -1, 64) + " s"
	}
	return strconv.FormatFloat(msec, 'f', -1, 64) + " ms"
}

func msOf(d time.Duration) float64 { return float64(d) / 1e6 }

// niceStep rounds raw up to 1, 2 or 5 times a power of ten.
func niceStep(raw float64) float64 {
	if raw <= 0 {
		return 1
	}
	p := math.Pow(10, math.Floor(math.Log10(raw)))
	for _, m := range []float64{1, 2, 5, 10} {
		if m*p >= raw {
			return m * p
		}
	}
	return 10 * p
}

// short writes a count compactly: 950, 7.1k, 12k.
func short(v float64) string {
	switch {
	case v >= 10000:
		return fmt.Sprintf("%.0fk", v/1000)
	case v >= 1000:
		return fmt.Sprintf("%.1fk", v/1000)
	}
	return fmt.Sprintf("%.0f", v)
}
