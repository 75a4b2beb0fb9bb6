// The fields of an HTTP message that a relay or a proxy passes on (server/http_relay.cc
// defines it; server/port_proxy.cc shares it).
#pragma once

#include <boost/beast/http/fields.hpp>

namespace sandboxd::server {

// Copies the end-to-end fields of `from` into `to`: not the hop-by-hop ones (RFC 9110
// 7.6.1's and those its Connection names), nor what a relay frames itself (Host,
// Content-Length, Transfer-Encoding, Expect).
void copy_end_to_end(const boost::beast::http::fields& from, boost::beast::http::fields& to);

}  // namespace sandboxd::server
