package poller

import "time"

// DescribeLimit is p's DescribeStream rate if a call reserved its turn
// now (review, session 27): its weight above 1 only while its validity
// runs.
func DescribeLimit(p *Poller) float64 {
	p.describe.mu.Lock()
	defer p.describe.mu.Unlock()
	return float64(p.describe.limitAt(time.Now()))
}
