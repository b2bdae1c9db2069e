//! How many requests a pass keeps in flight, and the runner that keeps them going.
//! Reads and dry runs of the plan are few once a plan lists what it can; the writes of
//! an apply are most of its time. The server takes them fastest with many in flight
//! (measured by `cargo bench --bench reconcile` on 1.37: 1,000 ConfigMaps at 584 a
//! second with 16 in flight, 835 with 64), which a one-off apply asks for
//! ([`Writes::Fastest`](super::options::Writes)); a daemon's passes keep to 16.

use std::future::Future;

use futures::StreamExt;
use futures::stream::FuturesUnordered;

/// Reads and dry runs a plan keeps in flight.
pub(super) const READS: usize = 16;

/// Writes an apply keeps in flight by default: a long-running daemon's passes share
/// the server with other clients, and at most these are on their way when its fence
/// closes.
pub(super) const WRITES_SHARED: usize = 16;

/// Writes a one-off apply keeps in flight: what the server takes fastest.
pub(super) const WRITES_FASTEST: usize = 64;

/// Runs `start(item)` for each item, at most `limit` at once, the next started as
/// soon as one ends; the results in the items' order, or the first error (then no
/// other starts, and those running are dropped). A future is made only as it starts:
/// one per object of 5,000 made at once was most of a start-up's peak.
pub(super) async fn try_each<I, T, E, F>(
    items: impl IntoIterator<Item = I>,
    limit: usize,
    mut start: impl FnMut(I) -> F,
) -> Result<Vec<T>, E>
where
    F: Future<Output = Result<T, E>>,
{
    let mut items = items.into_iter().enumerate();
    let mut running = FuturesUnordered::new();
    let mut done = Vec::new();
    loop {
        while running.len() < limit
            && let Some((at, item)) = items.next()
        {
            let future = start(item);
            running.push(async move { (at, future.await) });
        }
        match running.next().await {
            Some((at, result)) => done.push((at, result?)),
            None => break,
        }
    }
    done.sort_by_key(|(at, _)| *at);
    Ok(done.into_iter().map(|(_, result)| result).collect())
}

#[cfg(test)]
mod tests {
    use std::convert::Infallible;
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::time::Duration;

    use super::*;

    #[tokio::test]
    async fn keeps_the_limit_in_flight_and_the_items_order() {
        let (running, most) = (AtomicUsize::new(0), AtomicUsize::new(0));
        let results = try_each(0..40u64, 8, |i| {
            let (running, most) = (&running, &most);
            async move {
                let now = running.fetch_add(1, Ordering::SeqCst) + 1;
                most.fetch_max(now, Ordering::SeqCst);
                // Later items end sooner: the order comes from the items, not the ends.
                tokio::time::sleep(Duration::from_millis(40 - i)).await;
                running.fetch_sub(1, Ordering::SeqCst);
                Ok::<_, Infallible>(i * 2)
            }
        })
        .await;
        assert_eq!(results, Ok((0..40).map(|i| i * 2).collect::<Vec<_>>()));
        assert_eq!(most.load(Ordering::SeqCst), 8);
    }

    #[tokio::test]
    async fn the_first_error_stops_what_has_not_started() {
        let started = AtomicUsize::new(0);
        let result = try_each(0..100, 4, |i| {
            started.fetch_add(1, Ordering::SeqCst);
            async move { if i == 2 { Err("refused") } else { Ok(i) } }
        })
        .await;
        assert_eq!(result, Err("refused"));
        assert!(started.load(Ordering::SeqCst) < 10, "{started:?}");
    }
}
