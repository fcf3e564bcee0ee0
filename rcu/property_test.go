package rcu

import (
	"context"
	"testing"
	"time"

	"pgregory.net/rapid"
)

// TestGracePeriodProperty drives a domain with random interleavings of
// readers, tasks and polled grace periods, against a model of who held
// what when each grace period was requested:
//
//   - safety: when Done(c) is true, every read section that was open and
//     every task that was online when c was taken has since ended, gone
//     offline, unregistered or passed a quiescent state;
//   - liveness: once nothing holds the domain, every cookie completes.
func TestGracePeriodProperty(t *testing.T) {
	rapid.Check(t, func(rt *rapid.T) {
		d := New(WithStallTimeout(0), WithSpin(rapid.IntRange(0, 8).Draw(rt, "spin")))
		defer d.Close()

		type holder struct {
			id      int
			end     func()      // for sections
			task    *taskRunner // for tasks
			offline bool
		}
		nextID := 0
		sections := map[int]*holder{}
		tasks := map[int]*holder{}
		type pending struct {
			c       Cookie
			holders map[int]bool
		}
		var cookies []*pending
		// releaseAll ends every section and task; deferred too, because
		// rapid abandons a run by panicking out of it.
		releaseAll := func() {
			for id, h := range sections {
				h.end()
				delete(sections, id)
			}
			for id, h := range tasks {
				h.task.do((*Task).Unregister)
				h.task.stop()
				delete(tasks, id)
			}
		}
		defer releaseAll()
		release := func(id int) {
			for _, p := range cookies {
				delete(p.holders, id)
			}
		}
		pick := func(rt *rapid.T, m map[int]*holder, label string, ok func(*holder) bool) *holder {
			var ids []int
			for id, h := range m {
				if ok(h) {
					ids = append(ids, id)
				}
			}
			if len(ids) == 0 {
				rt.Skip("nothing to pick")
			}
			// Map order is random; sort for reproducible draws.
			for i := 1; i < len(ids); i++ {
				for j := i; j > 0 && ids[j] < ids[j-1]; j-- {
					ids[j], ids[j-1] = ids[j-1], ids[j]
				}
			}
			return m[rapid.SampledFrom(ids).Draw(rt, label)]
		}
		any := func(*holder) bool { return true }
		online := func(h *holder) bool { return !h.offline }

		rt.Repeat(map[string]func(*rapid.T){
			"read": func(rt *rapid.T) {
				nextID++
				sections[nextID] = &holder{id: nextID, end: holdSection(d)}
			},
			"end": func(rt *rapid.T) {
				h := pick(rt, sections, "section", any)
				h.end()
				delete(sections, h.id)
				release(h.id)
			},
			"register": func(rt *rapid.T) {
				nextID++
				tasks[nextID] = &holder{id: nextID, task: startTask(d, "prop")}
			},
			"checkpoint": func(rt *rapid.T) {
				h := pick(rt, tasks, "task", online)
				h.task.do((*Task).Checkpoint)
				// A checkpoint taken before a grace period began does not
				// count for it; the model credits it anyway, which can only
				// hide an error, never invent one.
				release(h.id)
			},
			"offline": func(rt *rapid.T) {
				h := pick(rt, tasks, "task", online)
				h.task.do((*Task).Offline)
				h.offline = true
				release(h.id)
			},
			"online": func(rt *rapid.T) {
				h := pick(rt, tasks, "task", func(h *holder) bool { return h.offline })
				h.task.do((*Task).Online)
				h.offline = false
			},
			"unregister": func(rt *rapid.T) {
				h := pick(rt, tasks, "task", any)
				h.task.do((*Task).Unregister)
				h.task.stop()
				delete(tasks, h.id)
				release(h.id)
			},
			"start": func(rt *rapid.T) {
				p := &pending{holders: map[int]bool{}}
				for id := range sections {
					p.holders[id] = true
				}
				for id, h := range tasks {
					if !h.offline {
						p.holders[id] = true
					}
				}
				p.c = d.Start()
				cookies = append(cookies, p)
			},
			"": func(rt *rapid.T) {
				for _, p := range cookies {
					if d.Done(p.c) && len(p.holders) > 0 {
						rt.Fatalf("cookie %d done while holders %v from before it still hold", p.c, p.holders)
					}
				}
			},
		})

		releaseAll()
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		for _, p := range cookies {
			if err := d.Wait(ctx, p.c); err != nil {
				rt.Fatalf("cookie %d never completed once nothing held the domain: %v", p.c, err)
			}
		}
	})
}
