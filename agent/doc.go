// Package agent is ukeyd's OCI seccomp agent: it serves the kernel key
// calls (add_key, keyctl, request_key) of containers whose runtime (runc,
// crun) hands it their seccomp listener, each container a key namespace
// of its own or, under a CRI runtime, each pod.
//
// The OCI runtime specification lets a container's seccomp profile name
// a listener socket (linux.seccomp.listenerPath): the runtime connects
// to it and sends the container's [ContainerProcessState] with the
// listener of the container's filter. An [Agent] accepts such runtimes
// ([Agent.Serve]), judges each (only the agent's equal may hand in a
// container), binds the container's id to the container's own processes,
// and serves the listener on a [server.Server] of the container's own,
// over a [keys.Service] of its own: no key, keyring or quota of one
// container is visible to or charged to another, which is what the
// kernel's keyrings lack and why runtimes forbid those calls. The
// containers together hold at most [Bounds] of the daemon's resources,
// each container and each uid in one its [Share]; their expensive
// operations take the daemon's slots ([server.Slots]). A container's
// keys go with its last process. Its containers and pods, with their
// keys, processes and listeners, and its socket go with the daemon's
// hand-over and its restart through systemd's store ([Agent.HandOver],
// [Agent.TakeOver]).
//
// Under a CRI runtime (containerd, CRI-O) the containers of a pod share
// one key namespace, named by the sandbox id of the state's annotations
// and bound to the IPC and network namespaces they share
// ([container.PodOf]); a profile whose listenerMetadata carries
// [PerContainerMetadata] keeps a container's own. A pod's keys go with
// the last process of its containers.
//
// The agent reaches the server only through its exported surface:
// [server.Config]'s Member, Pool and Expensive, [server.Limits.WithDefaults],
// [server.Server.StartListener] (whose tag names a listener's container
// across a hand-over), and for the hand-over [server.Server.Freeze] and
// [server.ThawHeld] ([server.TakeoverResult]'s Seccomp and SeccompTags).
package agent
