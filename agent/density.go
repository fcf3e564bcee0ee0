package agent

import "github.com/ukeys/ukeys/internal/container"

// IdleNamespaces makes n key namespaces as the agent makes a
// container's (newNamespace), each held by no container and serving
// nothing, and returns what ends them as a container's last process
// ending does. It is for measuring what an idle namespace costs
// (ukeybench density, the agent's tests): they count against no bound
// of containers and are not handed over.
func (a *Agent) IdleNamespaces(n int) (end func()) {
	nss := make([]*namespace, n)
	a.mu.Lock()
	for i := range nss {
		nss[i] = a.newNamespace("", container.Pod{})
	}
	a.mu.Unlock()
	return func() {
		for _, ns := range nss {
			ns.end()
		}
	}
}
