// Package containers tests ukeyd's seccomp agent under the container
// runtimes a host runs it with (runc, crun, podman, Docker, and
// containerd's CRI as a Kubernetes node runs it): containers
// whose profile hands their key system calls to the agent each add and
// find their own keys, see none of another's, and leave the kernel's
// keyrings as they were.
//
// The tests build ukeyd from cmd/ukeyd and run it by its flags, as a
// host does, and build testdata/keyprog as the static program each
// container runs. They need root, the runtime they test and the go
// command, and skip, saying so, without them.
package containers
