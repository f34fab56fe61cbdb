// HttpServer: httplib's server with the connection handling done here
// (private to src/server).
//
// Note [Hostile connections]
// httplib 0.11 (Debian's) gives every connection a pool thread for its whole
// life and reads with a timeout per recv() only, so a client that sends its
// headers a byte per second, or simply holds idle connections, occupies the
// pool and /health stops answering; its chunked-body reader has no limit at
// all. HttpServer replaces httplib's per-connection loop
// (process_and_close_socket) and keeps httplib's request parser, router and
// response writer (process_request):
//
// - At most `max_connections` connections are served at once; the pool has
//   that many threads plus a reserve, so an admitted connection never waits
//   for a thread. A connection past the cap gets a 503 and is closed.
// - A connection waits at most `keep_alive_timeout` for a request to start.
//   From its first byte, a request's head and body must arrive within
//   `receive_timeout`; then reads fail and the connection closes (408).
// - A request's head is received here, not by httplib: at most 64 KiB and
//   100 fields, checked against RFC 9112 before httplib parses it (Note
//   [Request head], request_head.h). A refused head is answered (400, 414,
//   431, 505) and its connection closes; so does every 400 httplib answers.
// - The receive deadline holds for every read, the head's included: a
//   client that keeps sending is cut at it as surely as one that stalls.
// - One request may read at most `max_request_bytes` raw bytes (head and
//   body together), so a chunk-size line cannot grow memory either,
//   whatever the handler does with the body.
// - A handler that leaves part of a body unread asks the connection to close
//   after its response (Connection::close_after_response), so the rest is
//   never parsed as a next request.
// - A chunked body's size lines are checked as they are read (Note [Chunk
//   sizes] in http_server.cpp).
#pragma once

#include <httplib.h>

#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <string>

namespace omni::server {

struct ConnectionLimits {
  std::size_t max_connections = 128;
  std::chrono::milliseconds keep_alive_timeout{2000};
  std::chrono::milliseconds receive_timeout{30000};
  std::chrono::milliseconds write_timeout{30000};
  std::uint64_t max_request_bytes = 8 << 20;
};

// The connection the calling pool thread is serving (null on other threads).
class Connection {
 public:
  static Connection* current();

  int fd() const { return fd_; }
  // The response being written is the last one on this connection.
  void close_after_response() { close_ = true; }
  bool closing() const { return close_; }
  // The current request's receive deadline passed before it was read whole.
  bool timed_out() const { return timed_out_; }
  // The client closed its end or reset the connection (a sync request whose
  // client went away). Never blocks.
  bool peer_gone() const;
  // The current request's body is chunked and about to be read: from here
  // its chunk-size lines are checked as they are read (Note [Chunk sizes]).
  void expect_chunked_body() { chunked_body_ = true; }
  // A read failed on a malformed chunk-size line of the current request.
  bool chunk_size_malformed() const { return chunk_size_malformed_; }

 private:
  friend class HttpServer;
  friend class RequestStream;
  explicit Connection(int fd) : fd_(fd) {}

  // Received bytes httplib has not read yet: a head (and what came with it)
  // received by RequestStream::receive_head. Empty between requests, unless
  // a client pipelined them.
  bool buffered() const { return taken_ < received_.size(); }

  int fd_;
  std::string received_;
  std::size_t taken_ = 0;  // received_[0, taken_) was read
  bool close_ = false;
  bool timed_out_ = false;
  bool chunked_body_ = false;          // reset by each request's RequestStream
  bool chunk_size_malformed_ = false;  // likewise
};

class HttpServer : public httplib::Server {
 public:
  explicit HttpServer(ConnectionLimits limits);

  // Threads the pool needs (new_task_queue uses it).
  std::size_t pool_threads() const;
  std::size_t open_connections() const { return open_.load(); }
  // Connections answered 503 because the cap was reached, since start.
  std::uint64_t refused_connections() const { return refused_.load(); }

 private:
  bool process_and_close_socket(socket_t sock) override;
  // Serves the requests of one admitted connection until it closes.
  void serve(socket_t sock);
  // Waits for the next request on an open connection to start; false when
  // it stays idle past keep_alive_timeout or the server stops.
  bool wait_for_request(const Connection& connection) const;
  // Answers 503 to a connection past the cap, then closes it.
  void refuse(socket_t sock) const;

  const ConnectionLimits limits_;
  std::atomic<std::size_t> open_{0};
  std::atomic<std::uint64_t> refused_{0};
};

}  // namespace omni::server
