// Package sockread reads a connection's socket as net.Conn.Read does,
// waiting in the runtime's poller while it has no bytes (deadlines and
// Close end the wait as for any read), but lets the caller act at the wait:
// the goose clients use it to learn that goose has nothing more for now
// (rest) and to hold no buffer while it has not (acp).
package sockread
