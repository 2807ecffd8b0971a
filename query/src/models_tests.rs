use super::*;

#[test]
fn query_cache_returns_what_was_put_and_evicts_the_oldest() {
    let mut c = QueryVectorCache::new(2);
    assert!(c.get("a").is_none());
    c.put("a", Arc::new(vec![1.0]));
    c.put("b", Arc::new(vec![2.0]));
    c.put("a", Arc::new(vec![9.0])); // already there: kept as it was
    assert_eq!(c.get("a").as_deref(), Some(&vec![1.0]));
    c.put("c", Arc::new(vec![3.0]));
    assert!(c.get("a").is_none(), "the oldest entry goes first");
    assert_eq!(c.get("b").as_deref(), Some(&vec![2.0]));
    assert_eq!(c.get("c").as_deref(), Some(&vec![3.0]));
    assert_eq!((c.vectors.len(), c.order.len()), (2, 2));
}

#[test]
fn a_zero_capacity_query_cache_keeps_nothing() {
    let mut c = QueryVectorCache::new(0);
    c.put("a", Arc::new(vec![1.0]));
    assert!(c.get("a").is_none());
    assert!(c.order.is_empty());
}
