# SPDX-License-Identifier: Apache-2.0 OR MIT
"""Offline @rules_cc: the C++ rules built into Bazel 4.2.3, under rules_cc's names.

Bazel 4.2.3 fetches rules_cc from the network for its own @bazel_tools BUILD
files, and Debian's bazel-rules-cc 0.0.4 needs `use_cpp_toolchain`, which 4.2.3
lacks. Every name here forwards to the native rule of the same name.
"""

def cc_binary(**attrs):
    native.cc_binary(**attrs)

def cc_import(**attrs):
    native.cc_import(**attrs)

def cc_library(**attrs):
    native.cc_library(**attrs)

def cc_test(**attrs):
    native.cc_test(**attrs)

def cc_proto_library(**attrs):
    native.cc_proto_library(**attrs)

def cc_toolchain(**attrs):
    native.cc_toolchain(**attrs)

def cc_toolchain_suite(**attrs):
    native.cc_toolchain_suite(**attrs)

def fdo_prefetch_hints(**attrs):
    native.fdo_prefetch_hints(**attrs)

def fdo_profile(**attrs):
    native.fdo_profile(**attrs)

def objc_import(**attrs):
    native.objc_import(**attrs)

def objc_library(**attrs):
    native.objc_library(**attrs)
