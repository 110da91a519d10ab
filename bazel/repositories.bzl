# SPDX-License-Identifier: Apache-2.0 OR MIT
"""Local replacements for the repositories Bazel 4.2.3 would download.

Declared before Bazel's own WORKSPACE suffix runs, so its `maybe(http_archive,
...)` calls see the name taken and never reach the network.
"""

def morpheus_offline_repositories():
    # @bazel_tools' own BUILD files load @rules_cc//cc:defs.bzl.
    native.local_repository(
        name = "rules_cc",
        path = "bazel/third_party/rules_cc",
    )

    # @bazel_tools//tools/jdk loads @rules_java//java:defs.bzl, and Bazel
    # parses it for every build to resolve the registered Java toolchains.
    native.local_repository(
        name = "rules_java",
        path = "bazel/third_party/rules_java",
    )

    # Referenced by every test rule; only `bazel coverage` would run it.
    native.local_repository(
        name = "remote_coverage_tools",
        path = "bazel/third_party/remote_coverage_tools",
    )
