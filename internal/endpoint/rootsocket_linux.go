package endpoint

// rootSocket is where a root daemon listens by default: under /run, where
// Linux keeps runtime state.
const rootSocket = "/run/ukeys/ukeyd.sock"
