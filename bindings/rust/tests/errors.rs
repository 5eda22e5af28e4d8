//! Argument checks: they fail with InvalidArgument and a message naming the argument, before
//! any rank communicates.

mod common;

use chorus::{Comm, Error, Group, ReduceOp, ResultCode, UniqueId};
use common::{run_ranks, single};

fn assert_invalid(result: Result<(), Error>, names: &[&str]) {
    let err = result.expect_err("call should fail");
    assert_eq!(err.code(), ResultCode::InvalidArgument, "{}", err);
    for name in names {
        assert!(
            err.message().contains(name),
            "message {:?} should mention {:?}",
            err.message(),
            name
        );
    }
    let shown = err.to_string();
    assert!(shown.contains(err.message()));
}

#[test]
fn length_mismatches_name_the_argument() {
    let comm = single();
    let send = [1.0f32; 4];
    let mut short = [0.0f32; 3];
    assert_invalid(
        comm.all_reduce(&send, &mut short, ReduceOp::Sum),
        &["all_reduce", "recv", "3", "4"],
    );
    assert_invalid(comm.all_gather(&send, &mut short), &["all_gather", "recv"]);
    assert_invalid(
        comm.reduce_scatter(&send, &mut short, ReduceOp::Sum),
        &["reduce_scatter", "send"],
    );
    assert_invalid(comm.all_to_all(&send, &mut short), &["all_to_all", "recv"]);
    assert_invalid(
        comm.reduce(&send, Some(&mut short), ReduceOp::Max, 0),
        &["reduce", "recv"],
    );
    assert_invalid(comm.gather(&send, Some(&mut short), 0), &["gather", "recv"]);
    assert_invalid(
        comm.scatter(Some(&send), &mut short, 0),
        &["scatter", "send"],
    );
}

#[test]
fn length_mismatch_on_two_ranks_checks_size() {
    let results = run_ranks(2, |comm| {
        let send = [1u32; 3];
        let mut recv = [0u32; 3];
        let gather = comm.all_gather(&send, &mut recv);
        let mut odd = [0u32; 3];
        let to_all = comm.all_to_all(&send, &mut odd);
        (gather, to_all)
    });
    for (gather, to_all) in results {
        assert_invalid(gather, &["recv", "3", "6"]);
        assert_invalid(to_all, &["send", "multiple"]);
    }
}

#[test]
fn missing_root_buffers() {
    let comm = single();
    let send = [1u8; 2];
    assert_invalid(
        comm.reduce(&send, None, ReduceOp::Sum, 0),
        &["recv", "root"],
    );
    assert_invalid(comm.gather(&send, None, 0), &["recv", "root"]);
    let mut recv = [0u8; 2];
    assert_invalid(comm.scatter(None, &mut recv, 0), &["send", "root"]);
}

#[test]
fn invalid_root_and_peer() {
    let comm = single();
    let mut buf = [0i32; 8];
    assert_invalid(comm.broadcast(&mut buf, 1), &["broadcast", "root", "1"]);
    assert_invalid(
        comm.reduce_in_place(&mut buf, ReduceOp::Sum, 5),
        &["root", "5"],
    );
    assert_invalid(comm.gather(&[1i32], None, usize::MAX), &["root"]);
    assert_invalid(comm.send(&buf, 1), &["send", "peer"]);
    assert_invalid(comm.recv(&mut buf, 2), &["recv", "peer"]);
    let mut group = Group::new();
    assert_invalid(group.send(&comm, &[1u8], 3), &["Group::send", "peer"]);
    assert!(group.is_empty());
}

#[test]
fn invalid_init_arguments() {
    let id = UniqueId::new().expect("UniqueId::new");
    let err = Comm::init_rank(2, 2, &id).expect_err("rank outside nranks");
    assert_eq!(err.code(), ResultCode::InvalidArgument);
    assert!(err.message().contains("rank"), "{}", err);
    let err = Comm::init_rank(0, 0, &id).expect_err("no ranks");
    assert!(err.message().contains("nranks"), "{}", err);
}

#[test]
fn bad_unique_id_is_a_library_error() {
    let junk = UniqueId::from_bytes(&[0xa5; UniqueId::BYTES]);
    let err = Comm::init_rank(1, 0, &junk).expect_err("junk id");
    assert_ne!(err.code(), ResultCode::InProgress);
    assert!(!err.message().is_empty());
}

#[test]
fn abort_frees_the_communicator() {
    let comm = single();
    let mut v = [5.0f64; 2];
    comm.all_reduce_in_place(&mut v, ReduceOp::Sum)
        .expect("one-rank all_reduce");
    assert_eq!(v, [5.0, 5.0]);
    comm.abort().expect("abort");
}
