// SPDX-License-Identifier: Apache-2.0 OR MIT
fn main() {
    napi_build::setup();
}
