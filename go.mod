module github.com/ukeys/ukeys

go 1.26.8

require (
	github.com/HdrHistogram/hdrhistogram-go v1.1.2 // indirect
	go.uber.org/goleak v1.3.0 // indirect
	pgregory.net/rapid v1.3.0 // indirect
)
