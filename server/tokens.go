package server

import (
	"crypto/rand"
	"encoding/hex"

	"github.com/ukeys/ukeys/keys"
)

// tokenTable holds the tokens the server has given out: session tokens
// (ukeyctl session), each granting one session keyring to one uid, and
// request-key helpers' tokens (helper.go). Its methods are called with
// s.mu held.
type tokenTable struct {
	sessions map[string]sessionGrant // session tokens
	grants   map[sessionGrant]string // the token of each grant, reused
	helpers  map[string]*helperGrant // request-key helper tokens (helper.go)
}

func newTokenTable() tokenTable {
	return tokenTable{
		sessions: make(map[string]sessionGrant),
		grants:   make(map[sessionGrant]string),
		helpers:  make(map[string]*helperGrant),
	}
}

func newToken() string {
	var b [16]byte
	if _, err := rand.Read(b[:]); err != nil {
		panic("server: no randomness for session tokens: " + err.Error())
	}
	return hex.EncodeToString(b[:])
}

// sessionGrant is what a session token grants, and to which uid.
type sessionGrant struct {
	key *keys.Key
	uid uint32
}

// sessionToken returns a token that grants possession of the caller's
// session keyring to processes of uid (and root) that present it: another
// uid that learns the token gains nothing from it.
func (s *Server) sessionToken(k *keys.Key, uid uint32) string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.tokens.session(sessionGrant{key: k, uid: uid})
}

// session returns g's token, made on first use.
func (t *tokenTable) session(g sessionGrant) string {
	// One token per session and uid: a client asking again and again
	// would otherwise grow the table for as long as the session lives.
	if tok, ok := t.grants[g]; ok {
		return tok
	}
	tok := newToken()
	t.sessions[tok] = g
	t.grants[g] = tok
	return tok
}

// lookup returns what token grants: a session (isSession), or a helper's
// authority (helper not nil), or nothing.
func (t *tokenTable) lookup(token string) (grant sessionGrant, isSession bool, helper *helperGrant) {
	grant, isSession = t.sessions[token]
	return grant, isSession, t.helpers[token]
}

// prune forgets the session tokens of sessions that no client process
// holds any more (held: every kept process's session).
func (t *tokenTable) prune(held map[*keys.Key]bool) {
	for tok, g := range t.sessions {
		if !held[g.key] {
			delete(t.sessions, tok)
			delete(t.grants, g)
		}
	}
}

// clearSessions forgets every session token, at Shutdown.
func (t *tokenTable) clearSessions() {
	clear(t.sessions)
	clear(t.grants)
}

// sessionRecord is a session token handed over (handoverRecords).
type sessionRecord struct {
	Token  string      `json:"token"`
	Serial keys.Serial `json:"serial"`
	UID    uint32      `json:"uid"`
}

// records returns the session tokens to hand over. Helpers' tokens are
// not: a hand-over waits until no upcall is in progress (parkAll).
func (t *tokenTable) records() []sessionRecord {
	var recs []sessionRecord
	for tok, g := range t.sessions {
		recs = append(recs, sessionRecord{Token: tok, Serial: g.key.Serial(), UID: g.uid})
	}
	return recs
}

// restore makes the session tokens handed over again, for the session
// keyrings that came with the keys.
func (t *tokenTable) restore(rs *keys.Restore, recs []sessionRecord) {
	for _, sr := range recs {
		k := rs.Key(sr.Serial)
		if k == nil || !k.IsKeyring() {
			continue
		}
		g := sessionGrant{key: k, uid: sr.UID}
		t.sessions[sr.Token] = g
		t.grants[g] = sr.Token
	}
}
