// The route table on its own (server/router.h): which route a request path reaches, its
// percent-decoded parameters, 404 against 405 with the Allow list, HEAD through GET, and
// paths a client made hostile. Pure logic: no root, no server.

#include "server/router.h"

#include <gtest/gtest.h>

#include <string>

namespace {

using sandboxd::server::percent_decode;
using sandboxd::server::RouteMatch;
using sandboxd::server::Router;
namespace http = boost::beast::http;
using Kind = RouteMatch::Kind;

// A table shaped like the API's: literals, parameters, a {key+} rest and a route that
// only differs from another by its method.
class RouterTest : public ::testing::Test {
 protected:
  void SetUp() override {
    list_ = router_.add(http::verb::get, "/api/gpt/v1/files", "files.list");
    upload_ = router_.add(http::verb::post, "/api/gpt/v1/files", "files.upload");
    file_ = router_.add(http::verb::get, "/api/gpt/v1/files/{file_id}", "files.get");
    remove_ = router_.add(http::verb::delete_, "/api/gpt/v1/files/{file_id}", "files.delete");
    tool_ = router_.add(http::verb::post, "/api/gpt/v1/containers/{id}/tools/{tool}", "containers.tool");
    object_ = router_.add(http::verb::get, "/objects/{key+}", "objects.get");
    head_ = router_.add(http::verb::head, "/objects/{key+}", "objects.head");
    page_ = router_.add(http::verb::get, "/page/{path+}", "page");
  }

  Router router_;
  size_t list_ = 0, upload_ = 0, file_ = 0, remove_ = 0, tool_ = 0, object_ = 0, head_ = 0, page_ = 0;
};

TEST_F(RouterTest, AFullPathReachesItsRouteWithItsParameters) {
  auto found = router_.match(http::verb::post, "/api/gpt/v1/containers/c-1/tools/bash");
  ASSERT_EQ(found.kind, Kind::kFound);
  EXPECT_EQ(found.route, tool_);
  EXPECT_EQ(router_.name(found.route), "containers.tool");
  EXPECT_EQ(found.params.at("id"), "c-1");
  EXPECT_EQ(found.params.at("tool"), "bash");
  EXPECT_EQ(found.params.size(), 2u);

  EXPECT_EQ(router_.match(http::verb::get, "/api/gpt/v1/files").route, list_);
  EXPECT_EQ(router_.match(http::verb::post, "/api/gpt/v1/files").route, upload_);
  EXPECT_EQ(router_.match(http::verb::get, "/api/gpt/v1/files/f1").route, file_);
  EXPECT_EQ(router_.match(http::verb::delete_, "/api/gpt/v1/files/f1").route, remove_);
}

TEST_F(RouterTest, ParametersArePercentDecodedOncePerSegment) {
  auto found = router_.match(http::verb::get, "/api/gpt/v1/files/a%20b%2Fc%25");
  ASSERT_EQ(found.kind, Kind::kFound);
  EXPECT_EQ(found.params.at("file_id"), "a b/c%") << "an encoded / stays inside the one parameter";
}

TEST_F(RouterTest, ARestParameterTakesEverySegmentLeftDecodedOneByOne) {
  auto found = router_.match(http::verb::get, "/objects/a/b%2Fc/d.txt");
  ASSERT_EQ(found.kind, Kind::kFound);
  EXPECT_EQ(found.route, object_);
  EXPECT_EQ(found.params.at("key"), "a/b/c/d.txt");
  EXPECT_EQ(router_.match(http::verb::get, "/objects").kind, Kind::kNotFound) << "at least one segment";
  // Past the indexed lengths, every route is tried: a very deep path still reaches it.
  std::string deep = "/objects";
  for (int i = 0; i < 40; ++i) deep += "/d" + std::to_string(i);
  auto far = router_.match(http::verb::get, deep);
  ASSERT_EQ(far.kind, Kind::kFound);
  EXPECT_EQ(far.route, object_);
  EXPECT_TRUE(far.params.at("key").starts_with("d0/d1/")) << far.params.at("key");
  EXPECT_TRUE(far.params.at("key").ends_with("/d39")) << far.params.at("key");
}

TEST_F(RouterTest, AnotherMethodOnAKnownPathIs405WithTheAllowedOnes) {
  auto refused = router_.match(http::verb::put, "/api/gpt/v1/files/f1");
  EXPECT_EQ(refused.kind, Kind::kMethodNotAllowed);
  EXPECT_EQ(refused.allow, "GET, DELETE");
  auto listing = router_.match(http::verb::delete_, "/api/gpt/v1/files");
  EXPECT_EQ(listing.kind, Kind::kMethodNotAllowed);
  EXPECT_EQ(listing.allow, "GET, POST");
}

TEST_F(RouterTest, AnUnknownPathIs404) {
  EXPECT_EQ(router_.match(http::verb::get, "/api/gpt/v1/nothing").kind, Kind::kNotFound);
  EXPECT_EQ(router_.match(http::verb::get, "/api/gpt/v1/files/f1/extra").kind, Kind::kNotFound);
  EXPECT_EQ(router_.match(http::verb::get, "/").kind, Kind::kNotFound);
  EXPECT_EQ(router_.match(http::verb::get, "").kind, Kind::kNotFound);
}

TEST_F(RouterTest, AnEmptyParameterSegmentMatchesNothing) {
  EXPECT_EQ(router_.match(http::verb::get, "/api/gpt/v1/files/").kind, Kind::kNotFound);
  EXPECT_EQ(router_.match(http::verb::post, "/api/gpt/v1/containers//tools/bash").kind, Kind::kNotFound);
}

TEST_F(RouterTest, AMalformedEscapeMatchesNoRoute) {
  EXPECT_EQ(router_.match(http::verb::get, "/api/gpt/v1/files/bad%2").kind, Kind::kNotFound);
  EXPECT_EQ(router_.match(http::verb::get, "/api/gpt/v1/files/bad%zz").kind, Kind::kNotFound);
  EXPECT_EQ(router_.match(http::verb::get, "/objects/ok/bad%G1").kind, Kind::kNotFound);
}

TEST_F(RouterTest, HeadIsServedByGetUnlessARouteHasItsOwnHead) {
  auto head_of_get = router_.match(http::verb::head, "/api/gpt/v1/files/f1");
  ASSERT_EQ(head_of_get.kind, Kind::kFound);
  EXPECT_EQ(head_of_get.route, file_);
  auto own_head = router_.match(http::verb::head, "/objects/k");
  ASSERT_EQ(own_head.kind, Kind::kFound);
  EXPECT_EQ(own_head.route, head_) << "the explicit HEAD route wins over GET-as-HEAD";
  auto page_head = router_.match(http::verb::head, "/page/index.html");
  ASSERT_EQ(page_head.kind, Kind::kFound);
  EXPECT_EQ(page_head.route, page_);
}

TEST(PercentDecode, DecodesEscapesAndRefusesBrokenOnes) {
  std::string out;
  EXPECT_TRUE(percent_decode("a%41%62%2f%2F", out));
  EXPECT_EQ(out, "aAb//");
  EXPECT_TRUE(percent_decode("%00", out));
  EXPECT_EQ(out, std::string(1, '\0')) << "a NUL is decoded; what may hold it is the handler's rule";
  EXPECT_TRUE(percent_decode("", out));
  EXPECT_EQ(out, "");
  for (const char* broken : {"%", "%4", "x%", "%g0", "%0g", "a%%41"})
    EXPECT_FALSE(percent_decode(broken, out)) << broken;
}

}  // namespace
