package rcu

import (
	"log/slog"
	"time"
)

// Defaults for the options below.
const (
	// DefaultStallTimeout is how old a grace period may grow before the
	// domain reports a stall. Like the kernel's RCU CPU stall timeout it is
	// tens of seconds: long enough that a loaded machine does not cry wolf.
	DefaultStallTimeout = 21 * time.Second
	// DefaultCallbackBacklog bounds the callbacks queued by [Domain.Call] and
	// not yet invoked. Call applies backpressure beyond it.
	DefaultCallbackBacklog = 1 << 16
	// DefaultCallbackBatch is how many callbacks the worker invokes before
	// it yields the processor.
	DefaultCallbackBatch = 1024
)

// Option configures a [Domain].
type Option func(*config)

type config struct {
	name         string
	stallTimeout time.Duration
	stallHandler func(StallReport)
	logger       *slog.Logger
	backlog      int
	batch        int
	inlineGP     bool
	spin         int
}

func defaultConfig() config {
	return config{
		name:         "rcu",
		stallTimeout: DefaultStallTimeout,
		backlog:      DefaultCallbackBacklog,
		batch:        DefaultCallbackBatch,
		spin:         64,
	}
}

// WithName names the domain in stall reports, logs and statistics.
func WithName(name string) Option { return func(c *config) { c.name = name } }

// WithStallTimeout sets the age at which a grace period is reported as
// stalled. Reports repeat at doubling intervals until the grace period
// ends. A value of zero or less turns stall reports off.
func WithStallTimeout(d time.Duration) Option {
	return func(c *config) { c.stallTimeout = d }
}

// WithStallHandler replaces the default handler (a structured slog warning)
// for stall reports. The handler runs on its own goroutine, never on the
// grace-period path, and must not block for long.
func WithStallHandler(h func(StallReport)) Option {
	return func(c *config) { c.stallHandler = h }
}

// WithLogger sets the logger used by the default stall handler.
func WithLogger(l *slog.Logger) Option { return func(c *config) { c.logger = l } }

// WithCallbackBacklog bounds the number of callbacks queued by [Domain.Call]
// and not yet invoked. When the backlog is full, Call waits for room (or,
// with [WithInlineGracePeriod], waits for a grace period itself and runs the
// callback inline). Values below 1 are treated as 1.
func WithCallbackBacklog(n int) Option { return func(c *config) { c.backlog = max(n, 1) } }

// WithCallbackBatch sets how many callbacks the worker invokes between two
// yields of the processor. Values below 1 are treated as 1.
func WithCallbackBatch(n int) Option { return func(c *config) { c.batch = max(n, 1) } }

// WithInlineGracePeriod makes [Domain.Call], when the backlog is full, wait
// for a grace period on the calling goroutine and then run the callback
// there, as liburcu's call_rcu falls back to synchronize_rcu when it cannot
// allocate. Without it Call waits for the worker to make room.
func WithInlineGracePeriod() Option { return func(c *config) { c.inlineGP = true } }

// WithSpin sets how many times a grace-period waiter yields the processor
// ([runtime.Gosched]) while polling before it parks until woken. Polling
// briefly avoids paying a goroutine wake-up when holdouts report within
// microseconds; parking bounds the CPU spent on long grace periods.
// Zero parks at once.
func WithSpin(n int) Option { return func(c *config) { c.spin = max(n, 0) } }
