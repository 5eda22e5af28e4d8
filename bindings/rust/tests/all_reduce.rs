//! All-reduce across ranks running as threads of this process.

mod common;

use chorus::{Comm, ReduceOp, UniqueId};
use common::run_ranks;

/// Rank r's i-th input: small integers, exact in every element type used here.
fn value(rank: usize, i: usize) -> i64 {
    ((rank * 37 + i * 11) % 23) as i64 - 7
}

#[test]
fn two_ranks_sum_f32() {
    const N: usize = 1000;
    let expected: Vec<f32> = (0..N).map(|i| (value(0, i) + value(1, i)) as f32).collect();
    let results = run_ranks(2, |comm| {
        let send: Vec<f32> = (0..N).map(|i| value(comm.rank(), i) as f32).collect();
        let mut recv = vec![f32::NAN; N];
        comm.all_reduce(&send, &mut recv, ReduceOp::Sum)
            .expect("all_reduce");
        recv
    });
    for (rank, got) in results.iter().enumerate() {
        assert_eq!(got, &expected, "rank {}", rank);
    }
}

#[test]
fn three_ranks_in_place_i64_ops() {
    const N: usize = 257;
    let ops = [ReduceOp::Sum, ReduceOp::Prod, ReduceOp::Max, ReduceOp::Min];
    let expected: Vec<Vec<i64>> = ops
        .iter()
        .map(|op| {
            (0..N)
                .map(|i| {
                    let v = (0..3).map(|r| value(r, i));
                    match op {
                        ReduceOp::Sum => v.sum(),
                        ReduceOp::Prod => v.product(),
                        ReduceOp::Max => v.max().unwrap(),
                        ReduceOp::Min => v.min().unwrap(),
                        ReduceOp::Avg => unreachable!(),
                    }
                })
                .collect()
        })
        .collect();
    let results = run_ranks(3, |comm| {
        ops.iter()
            .map(|&op| {
                let mut buf: Vec<i64> = (0..N).map(|i| value(comm.rank(), i)).collect();
                comm.all_reduce_in_place(&mut buf, op)
                    .expect("all_reduce_in_place");
                buf
            })
            .collect::<Vec<_>>()
    });
    for (rank, per_op) in results.iter().enumerate() {
        for (k, got) in per_op.iter().enumerate() {
            assert_eq!(got, &expected[k], "rank {} op {:?}", rank, ops[k]);
        }
    }
}

#[test]
fn two_ranks_avg_f64_and_u8_sum() {
    const N: usize = 64;
    let results = run_ranks(2, |comm| {
        let send: Vec<f64> = (0..N).map(|i| value(comm.rank(), i) as f64).collect();
        let mut avg = vec![0.0f64; N];
        comm.all_reduce(&send, &mut avg, ReduceOp::Avg)
            .expect("all_reduce avg");
        let bytes: Vec<u8> = (0..N).map(|i| (comm.rank() * 100 + i) as u8).collect();
        let mut sum = vec![0u8; N];
        comm.all_reduce(&bytes, &mut sum, ReduceOp::Sum)
            .expect("all_reduce u8");
        (avg, sum)
    });
    for (avg, sum) in results {
        for i in 0..N {
            assert_eq!(avg[i], (value(0, i) + value(1, i)) as f64 / 2.0);
            assert_eq!(sum[i], (i as u8).wrapping_add((100 + i) as u8));
        }
    }
}

#[test]
fn unique_id_bytes_round_trip() {
    let id = UniqueId::new().expect("UniqueId::new");
    let bytes = *id.as_bytes();
    let copy = UniqueId::from_bytes(&bytes);
    assert_eq!(copy, id);
    let sums = std::thread::scope(|s| {
        let a = s.spawn(|| {
            let comm = Comm::init_rank(2, 0, &id).expect("rank 0");
            let mut v = [1u32, 2, 3];
            comm.all_reduce_in_place(&mut v, ReduceOp::Sum)
                .expect("rank 0");
            v
        });
        let b = s.spawn(|| {
            let comm = Comm::init_rank(2, 1, &copy).expect("rank 1");
            let mut v = [10u32, 20, 30];
            comm.all_reduce_in_place(&mut v, ReduceOp::Sum)
                .expect("rank 1");
            v
        });
        [a.join().unwrap(), b.join().unwrap()]
    });
    assert_eq!(sums, [[11, 22, 33], [11, 22, 33]]);
}

#[test]
fn comm_moves_between_threads() {
    let id = UniqueId::new().expect("UniqueId::new");
    let handles: Vec<_> = (0..2)
        .map(|rank| std::thread::spawn(move || Comm::init_rank(2, rank, &id).expect("init")))
        .collect();
    let comms: Vec<Comm> = handles.into_iter().map(|h| h.join().unwrap()).collect();
    let results: Vec<Vec<i32>> = comms
        .into_iter()
        .map(|comm| {
            std::thread::spawn(move || {
                let mut v = vec![comm.rank() as i32 + 1; 5];
                comm.all_reduce_in_place(&mut v, ReduceOp::Sum)
                    .expect("all_reduce");
                comm.destroy().expect("destroy");
                v
            })
        })
        .collect::<Vec<_>>()
        .into_iter()
        .map(|h| h.join().unwrap())
        .collect();
    assert_eq!(results, vec![vec![3; 5], vec![3; 5]]);
}

#[test]
fn versions() {
    let v = chorus::version().expect("version");
    assert!(v >= 22700, "NCCL API level {}", v);
    assert!(!chorus::version_string().is_empty());
}
