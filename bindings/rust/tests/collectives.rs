//! Broadcast, reduce, gathers, scatters, all-to-all and point-to-point groups.

mod common;

use chorus::{Bf16, Group, ReduceOp};
use common::run_ranks;

fn value(rank: usize, i: usize) -> i32 {
    (rank * 1000 + i) as i32
}

#[test]
fn all_gather_three_ranks() {
    const N: usize = 100;
    let expected: Vec<u64> = (0..3)
        .flat_map(|r| (0..N).map(move |i| value(r, i) as u64))
        .collect();
    let results = run_ranks(3, |comm| {
        let send: Vec<u64> = (0..N).map(|i| value(comm.rank(), i) as u64).collect();
        let mut recv = vec![0u64; N * comm.size()];
        comm.all_gather(&send, &mut recv).expect("all_gather");
        recv
    });
    for got in results {
        assert_eq!(got, expected);
    }
}

#[test]
fn reduce_scatter_two_ranks() {
    const BLOCK: usize = 33;
    let total: Vec<f64> = (0..2 * BLOCK)
        .map(|i| (value(0, i) + value(1, i)) as f64)
        .collect();
    let results = run_ranks(2, |comm| {
        let send: Vec<f64> = (0..2 * BLOCK)
            .map(|i| value(comm.rank(), i) as f64)
            .collect();
        let mut recv = vec![0.0f64; BLOCK];
        comm.reduce_scatter(&send, &mut recv, ReduceOp::Sum)
            .expect("reduce_scatter");
        recv
    });
    for (rank, got) in results.iter().enumerate() {
        assert_eq!(&got[..], &total[rank * BLOCK..(rank + 1) * BLOCK]);
    }
}

#[test]
fn broadcast_three_ranks_from_root_one() {
    const N: usize = 77;
    let expected: Vec<i32> = (0..N).map(|i| value(1, i)).collect();
    let results = run_ranks(3, |comm| {
        let mut buf: Vec<i32> = (0..N).map(|i| value(comm.rank(), i)).collect();
        comm.broadcast(&mut buf, 1).expect("broadcast");
        buf
    });
    for got in results {
        assert_eq!(got, expected);
    }
}

#[test]
fn reduce_to_root_three_ranks() {
    const N: usize = 40;
    let expected: Vec<i32> = (0..N).map(|i| (0..3).map(|r| value(r, i)).sum()).collect();
    let results = run_ranks(3, |comm| {
        let send: Vec<i32> = (0..N).map(|i| value(comm.rank(), i)).collect();
        if comm.rank() == 2 {
            let mut recv = vec![0i32; N];
            comm.reduce(&send, Some(&mut recv), ReduceOp::Sum, 2)
                .expect("reduce root");
            recv
        } else {
            comm.reduce(&send, None, ReduceOp::Sum, 2).expect("reduce");
            send
        }
    });
    assert_eq!(results[2], expected);
    assert_eq!(results[0], (0..N).map(|i| value(0, i)).collect::<Vec<_>>());
}

#[test]
fn gather_and_scatter_three_ranks() {
    const N: usize = 9;
    let results = run_ranks(3, |comm| {
        let send: Vec<i8> = (0..N).map(|i| (comm.rank() * 10 + i) as i8).collect();
        let mut gathered = vec![0i8; N * 3];
        let root_buf = if comm.rank() == 0 {
            Some(&mut gathered[..])
        } else {
            None
        };
        comm.gather(&send, root_buf, 0).expect("gather");
        let mut piece = vec![0i8; N];
        let source = if comm.rank() == 0 {
            Some(&gathered[..])
        } else {
            None
        };
        comm.scatter(source, &mut piece, 0).expect("scatter");
        (gathered, piece, send)
    });
    let all: Vec<i8> = (0..3)
        .flat_map(|r| (0..N).map(move |i| (r * 10 + i) as i8))
        .collect();
    assert_eq!(results[0].0, all);
    for (gathered_unused, piece, send) in &results {
        let _ = gathered_unused;
        assert_eq!(piece, send);
    }
}

#[test]
fn all_to_all_three_ranks() {
    const BLOCK: usize = 5;
    let results = run_ranks(3, |comm| {
        // Block j of rank r's send: values (r, j, k).
        let send: Vec<u32> = (0..3 * BLOCK)
            .map(|x| (comm.rank() * 100 + (x / BLOCK) * 10 + x % BLOCK) as u32)
            .collect();
        let mut recv = vec![0u32; 3 * BLOCK];
        comm.all_to_all(&send, &mut recv).expect("all_to_all");
        recv
    });
    for (me, got) in results.iter().enumerate() {
        let expected: Vec<u32> = (0..3 * BLOCK)
            .map(|x| ((x / BLOCK) * 100 + me * 10 + x % BLOCK) as u32)
            .collect();
        assert_eq!(got, &expected, "rank {}", me);
    }
}

#[test]
fn send_recv_pair_in_a_group() {
    const N: usize = 4096;
    let results = run_ranks(2, |comm| {
        let peer = 1 - comm.rank();
        let mine: Vec<f32> = (0..N).map(|i| value(comm.rank(), i) as f32).collect();
        let mut theirs = vec![0.0f32; N];
        let mut group = Group::new();
        group.send(comm, &mine, peer).expect("Group::send");
        group.recv(comm, &mut theirs, peer).expect("Group::recv");
        assert_eq!(group.len(), 2);
        group.run().expect("Group::run");
        theirs
    });
    for (rank, got) in results.iter().enumerate() {
        let expected: Vec<f32> = (0..N).map(|i| value(1 - rank, i) as f32).collect();
        assert_eq!(got, &expected);
    }
}

#[test]
fn ring_shift_three_ranks_in_a_group() {
    const N: usize = 31;
    let results = run_ranks(3, |comm| {
        let n = comm.size();
        let next = (comm.rank() + 1) % n;
        let prev = (comm.rank() + n - 1) % n;
        let mine: Vec<Bf16> = (0..N)
            .map(|i| Bf16::from_f32((comm.rank() * 64 + i) as f32))
            .collect();
        let mut got = vec![Bf16::default(); N];
        let mut group = Group::new();
        group.recv(comm, &mut got, prev).expect("Group::recv");
        group.send(comm, &mine, next).expect("Group::send");
        group.run().expect("Group::run");
        got
    });
    for (rank, got) in results.iter().enumerate() {
        let prev = (rank + 2) % 3;
        let expected: Vec<f32> = (0..N).map(|i| (prev * 64 + i) as f32).collect();
        let got: Vec<f32> = got.iter().map(|b| b.to_f32()).collect();
        assert_eq!(got, expected);
    }
}

#[test]
fn blocking_send_then_recv() {
    let results = run_ranks(2, |comm| {
        let mut buf = [0i64; 3];
        if comm.rank() == 0 {
            comm.send(&[7i64, 8, 9], 1).expect("send");
        } else {
            comm.recv(&mut buf, 0).expect("recv");
        }
        buf
    });
    assert_eq!(results[1], [7, 8, 9]);
}

#[test]
fn empty_group_runs() {
    Group::new().run().expect("empty group");
}
