//! Runs one closure per rank, each on its own thread with its own communicator.

#![allow(dead_code)]

use chorus::{Comm, UniqueId};

/// Creates an `nranks`-rank host communicator (one thread per rank, one fresh id) and returns
/// what `body` gives on each rank, in rank order.
pub fn run_ranks<R, F>(nranks: usize, body: F) -> Vec<R>
where
    F: Fn(&Comm) -> R + Sync,
    R: Send,
{
    let id = UniqueId::new().expect("UniqueId::new");
    let body = &body;
    std::thread::scope(|s| {
        let handles: Vec<_> = (0..nranks)
            .map(|rank| {
                s.spawn(move || {
                    let comm = Comm::init_rank(nranks, rank, &id)
                        .unwrap_or_else(|e| panic!("rank {}: init_rank: {}", rank, e));
                    assert_eq!(comm.rank(), rank);
                    assert_eq!(comm.size(), nranks);
                    body(&comm)
                })
            })
            .collect();
        handles
            .into_iter()
            .map(|h| h.join().expect("rank thread panicked"))
            .collect()
    })
}

/// A one-rank communicator, for argument checks that never reach other ranks.
pub fn single() -> Comm {
    let id = UniqueId::new().expect("UniqueId::new");
    Comm::init_rank(1, 0, &id).expect("init_rank(1, 0)")
}
