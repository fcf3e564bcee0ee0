module github.com/ukeys/ukeys

go 1.26.8

require (
	github.com/HdrHistogram/hdrhistogram-go v1.1.2
	go.uber.org/goleak v1.3.0
	pgregory.net/rapid v1.3.0
)
