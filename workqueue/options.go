package workqueue

import (
	"log/slog"
	"time"
)

// DefaultWatchdog is how long an item may run before the watchdog reports
// it. Ten seconds is far beyond what a well-behaved item (one bounded
// chunk of work) takes, and short enough that a stuck item is noticed long
// before anyone reads a dump of all goroutines.
const DefaultWatchdog = 10 * time.Second

// Option configures a [Queue].
type Option func(*config)

type config struct {
	name      string
	workers   int
	watchdog  time.Duration
	wdHandler func(WatchdogReport)
	logger    *slog.Logger
}

func defaultConfig() config {
	return config{name: "workqueue", watchdog: DefaultWatchdog}
}

// WithName names the queue in watchdog reports, logs and the names of its
// workers' rcu tasks.
func WithName(name string) Option { return func(c *config) { c.name = name } }

// WithWorkers sets the number of worker goroutines; the default is
// [runtime.GOMAXPROCS](0). Values below 1 are treated as 1.
func WithWorkers(n int) Option { return func(c *config) { c.workers = max(n, 1) } }

// WithWatchdog sets how long an item may run before the watchdog reports
// it. Reports repeat at doubling intervals (threshold, then 2×, 4×… later)
// while the item keeps running. Zero or less turns the watchdog off.
func WithWatchdog(threshold time.Duration) Option {
	return func(c *config) { c.watchdog = threshold }
}

// WithWatchdogHandler replaces the default handler (a structured slog
// warning) for watchdog reports. The handler runs on the watchdog's own
// goroutine, never on a worker; it should not block for long, [Queue.Close]
// waits for a handler that is running, and so the handler must not call
// Close.
func WithWatchdogHandler(h func(WatchdogReport)) Option {
	return func(c *config) { c.wdHandler = h }
}

// WithLogger sets the logger used by the default watchdog handler; the
// default is [slog.Default]().
func WithLogger(l *slog.Logger) Option { return func(c *config) { c.logger = l } }
