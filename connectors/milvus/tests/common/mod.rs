//! What the live tests share.

/// Milvus' address: these tests fail, never skip, without one.
pub fn url() -> String {
    std::env::var("FRESHET_MILVUS_URL")
        .ok()
        .filter(|u| !u.is_empty())
        .unwrap_or_else(|| {
            panic!("FRESHET_MILVUS_URL is not set: deploy/test.sh starts Milvus and sets it")
        })
}
