// Package ledgertest has what tests and benchmarks of the stream
// consumers share: reading a stream back from DynamoDB (Local), generating
// randomized transaction workloads written straight to the table, and fault
// injection at the SDK's HTTP transport, in front of the real DynamoDB.
package ledgertest
