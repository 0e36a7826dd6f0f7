package mathgrade_test

import (
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/rollfleet/rollfleet/envs/mathgrade"
)

// pathological are hostile (response, expected) pairs: huge exponents, deep
// nesting, long answers and long responses. Each must grade as 0, quickly.
func pathological() [][2]string {
	mb := 1 << 20
	return [][2]string{
		{`\boxed{2^{2^{2^{2^{2^{99999999}}}}}}`, `4`},
		{`\boxed{9^{9^{9^{9}}}}`, `9^{9^{9^{9}}}+1`},
		{`\boxed{` + strings.Repeat("(", 5000) + "1" + strings.Repeat(")", 5000) + `}`, `1`},
		{`\boxed{` + strings.Repeat(`\frac{1}{`, 3000) + "2" + strings.Repeat("}", 3000) + `}`, `2`},
		{`\boxed{` + strings.Repeat("1", mb) + `}`, `1`},
		{strings.Repeat("The final answer is 5 and ", mb/26) + `\boxed{6}`, `5`},
		{strings.Repeat(`$x$ `, mb/4) + `\boxed{1}`, `2`},
		{strings.Repeat(`\boxed{1} `, mb/10), `2`},
		{`\boxed{` + strings.Repeat(`\sin(`, 2000) + "x" + strings.Repeat(")", 2000) + `}`, `\sin x`},
		{`\boxed{` + strings.Repeat(`x^{x}`, 2000) + `}`, `x`},
		{`\boxed{` + strings.Repeat(`1 \pm `, 500) + `1}`, `1`},
		{`\boxed{` + strings.Repeat(`x<`, 3000) + `1}`, `(-\infty,1)`},
		{`\boxed{` + strings.Repeat(`(x+1)^{999}`, 300) + `}`, `x`},
		{`\boxed{` + strings.Repeat(`\{`, 60) + "1" + strings.Repeat(`\}`, 60) + `}`, `1`},
		{`\boxed{1000!}`, `1000 \cdot 999! + 1`},
	}
}

// BenchmarkGrade grades a mix of the table's cases and the pathological
// pairs, and reports throughput (answers/s), the p99 latency of one call,
// and the worst pathological call.
func BenchmarkGrade(b *testing.B) {
	var pairs [][2]string
	for _, c := range loadTable(b) {
		pairs = append(pairs, [2]string{c.Response, c.Expected})
	}
	bad := pathological()
	lat := make([]time.Duration, 0, b.N)
	var worst time.Duration
	b.ResetTimer()
	start := time.Now()
	for i := 0; i < b.N; i++ {
		var p [2]string
		if i%50 == 49 { // 2% hostile traffic
			p = bad[(i/50)%len(bad)]
		} else {
			p = pairs[i%len(pairs)]
		}
		t0 := time.Now()
		r := mathgrade.Grade(p[0], p[1])
		d := time.Since(t0)
		lat = append(lat, d)
		if i%50 == 49 {
			worst = max(worst, d)
			if r.Reward != 0 {
				b.Fatalf("pathological pair %d rewarded", (i/50)%len(bad))
			}
		}
	}
	elapsed := time.Since(start)
	b.StopTimer()
	slices.Sort(lat)
	b.ReportMetric(float64(b.N)/elapsed.Seconds(), "answers/s")
	b.ReportMetric(float64(lat[len(lat)*99/100].Microseconds()), "p99-µs")
	b.ReportMetric(float64(lat[len(lat)/2].Microseconds()), "p50-µs")
	b.ReportMetric(float64(worst.Microseconds()), "worst-hostile-µs")
}

// TestPathological checks that every hostile pair ends, graded 0
// (BenchmarkGrade measures how fast).
func TestPathological(t *testing.T) {
	// How fast is BenchmarkGrade's to say; here each must end, unrewarded.
	for i, p := range pathological() {
		r := mathgrade.Grade(p[0], p[1])
		if r.Reward != 0 {
			t.Errorf("pathological pair %d rewarded", i)
		}
	}
}
