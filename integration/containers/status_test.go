package containers

import (
	"fmt"
	"io"
	"net/http"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/ukeys/ukeys/client"
	"github.com/ukeys/ukeys/internal/testutil"
)

// A container runc runs is in ukeyd's status, for root, with its keys
// and calls, and in its metrics as series labelled by its id (never by
// its keys' descriptions); once it has exited, in neither.
func TestRuncNamespaceStatusAndMetrics(t *testing.T) {
	runc, gobin := runcAndGo(t)
	dir, agent, log := agentDaemonLog(t)
	configure, run := runcBundle(t, runc, gobin, dir)
	cl, err := client.Dial(filepath.Join(dir, "run", "ukeyd.sock"))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	var addr string
	testutil.Eventually(t, "the daemon to say where its metrics are", func() bool {
		m := regexp.MustCompile(`"ukeyd: metrics" addr=(\S+)`).FindStringSubmatch(log.String())
		if m != nil {
			addr = m[1]
		}
		return m != nil
	})
	// Scraped at most once a second: others are answered 429.
	scrape := func() string {
		var body string
		testutil.Eventually(t, "a scrape", func() bool {
			resp, err := http.Get("http://" + addr + "/metrics")
			if err != nil {
				return false
			}
			defer resp.Body.Close()
			b, _ := io.ReadAll(resp.Body)
			body = string(b)
			return resp.StatusCode == http.StatusOK
		})
		return body
	}

	ctr := id("status")
	configure(notifyKeyCalls(agent), "add", "status-secret-desc", "3")
	done := make(chan string, 1)
	go func() { done <- run(ctr) }()
	var ns client.NamespaceStatus
	testutil.Eventually(t, "the container's namespace in the status", func() bool {
		nss, listed, err := cl.Namespaces()
		if err != nil || !listed {
			t.Fatalf("Namespaces: %v, listed %v", err, listed)
		}
		i := slices.IndexFunc(nss, func(ns client.NamespaceStatus) bool { return ns.ID == ctr })
		if i < 0 {
			return false
		}
		ns = nss[i]
		return ns.Keys > 0 && ns.Calls > 0
	})
	if ns.Kind != "container" || !slices.Equal(ns.Containers, []string{ctr}) || ns.Processes < 1 || ns.Refusals != 0 {
		t.Errorf("the container's namespace: %+v", ns)
	}
	body := scrape()
	for _, want := range []string{
		fmt.Sprintf(`ukeyd_namespace_keys{container=%q,pod=""}`, ctr),
		fmt.Sprintf(`ukeyd_namespace_calls_total{container=%q,pod=""}`, ctr),
		fmt.Sprintf(`ukeyd_namespace_refusals_total{container=%q,pod=""} 0`, ctr),
	} {
		if !strings.Contains(body, want) {
			t.Errorf("the metrics lack %s", want)
		}
	}
	if strings.Contains(body, "status-secret-desc") {
		t.Error("a key's description is in the metrics")
	}
	if out := <-done; out != "add ok\nsearch ok" {
		t.Errorf("the container said %q", out)
	}
	testutil.Eventually(t, "the namespace to end", func() bool {
		nss, _, err := cl.Namespaces()
		return err == nil && !slices.ContainsFunc(nss, func(ns client.NamespaceStatus) bool { return ns.ID == ctr })
	})
	if body := scrape(); strings.Contains(body, ctr) {
		t.Errorf("an ended namespace's series are still there:\n%s", body)
	}
}
