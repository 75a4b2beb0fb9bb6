// The host's /etc entries a sandbox may see (on the host image): what programs need to
// run, never passwd/shadow or anything of sandboxd's. Both tiers build /etc from it.
#pragma once

namespace sandboxd::runtime {

inline constexpr const char* kHostEtcAllowList[] = {"alternatives",
                                                    "bash.bashrc",
                                                    "ca-certificates",
                                                    "ca-certificates.conf",
                                                    "debian_version",
                                                    "environment",
                                                    "fonts",
                                                    "gai.conf",
                                                    "host.conf",
                                                    "inputrc",
                                                    "issue",
                                                    "ld.so.cache",
                                                    "ld.so.conf",
                                                    "ld.so.conf.d",
                                                    "locale.alias",
                                                    "locale.gen",
                                                    "localtime",
                                                    "magic",
                                                    "magic.mime",
                                                    "matplotlibrc",
                                                    "mime.types",
                                                    "os-release",
                                                    "profile",
                                                    "protocols",
                                                    "python3",
                                                    "python3.11",
                                                    "services",
                                                    "ssl",
                                                    "terminfo",
                                                    "timezone",
                                                    "vim",
                                                    "xdg"};

}  // namespace sandboxd::runtime
