//! A future polled only when something it waits on has woken it.
//!
//! A connection's task waits on its hyper connection, which wakes it several times a request,
//! and beside it on things that almost never happen (shutdown, the watch's deadline, a request
//! to close). In one `select!` every wake-up of the first polls all the others; wrapped in
//! [`WhenWoken`] (made when the connection opens, and again when it starts draining), they cost
//! such a wake-up a waker's registration and an atomic swap.

use futures_util::task::AtomicWaker;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::task::{Context, Poll, Wake, Waker};

/// `inner`, polled on its first poll and then only after it woke its waker.
pub(super) struct WhenWoken<F> {
    inner: Pin<Box<F>>,
    signal: Arc<Signal>,
    waker: Waker,
}

/// Whether the inner future was woken since it was last polled, and the task to wake.
struct Signal {
    woken: AtomicBool,
    task: AtomicWaker,
}

impl Wake for Signal {
    fn wake(self: Arc<Self>) {
        self.wake_by_ref();
    }

    fn wake_by_ref(self: &Arc<Self>) {
        self.woken.store(true, Ordering::Release);
        self.task.wake();
    }
}

impl<F: Future> WhenWoken<F> {
    /// `inner`, to be polled on the first poll.
    pub(super) fn new(inner: F) -> Self {
        let signal = Arc::new(Signal { woken: AtomicBool::new(true), task: AtomicWaker::new() });
        WhenWoken { inner: Box::pin(inner), waker: Waker::from(signal.clone()), signal }
    }
}

impl<F: Future> Future for WhenWoken<F> {
    type Output = F::Output;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<F::Output> {
        // Registered first: a wake-up after the swap below wakes this task again.
        self.signal.task.register(cx.waker());
        if !self.signal.woken.swap(false, Ordering::AcqRel) {
            return Poll::Pending;
        }
        let this = &mut *self;
        this.inner.as_mut().poll(&mut Context::from_waker(&this.waker))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::AtomicUsize;

    /// Counts its polls; ready once `ready` is set, pending (and woken by nobody) before.
    struct Counted {
        polls: Arc<AtomicUsize>,
        ready: Arc<AtomicBool>,
        waker: Arc<std::sync::Mutex<Option<Waker>>>,
    }

    impl Future for Counted {
        type Output = ();
        fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
            self.polls.fetch_add(1, Ordering::SeqCst);
            if self.ready.load(Ordering::SeqCst) {
                return Poll::Ready(());
            }
            *self.waker.lock().unwrap() = Some(cx.waker().clone());
            Poll::Pending
        }
    }

    #[test]
    fn it_is_polled_first_and_then_only_after_its_own_wake_up() {
        let (polls, ready, waker) = (Arc::new(AtomicUsize::new(0)), Arc::new(AtomicBool::new(false)), Arc::default());
        let mut future = std::pin::pin!(WhenWoken::new(Counted { polls: polls.clone(), ready: ready.clone(), waker: Arc::clone(&waker) }));
        let task_woken = Arc::new(TaskWoken::default());
        let task_waker = Waker::from(task_woken.clone());
        let mut cx = Context::from_waker(&task_waker);
        assert!(future.as_mut().poll(&mut cx).is_pending());
        assert_eq!(polls.load(Ordering::SeqCst), 1, "the first poll reaches the inner future");
        // The task is woken by something else: the inner future is not polled.
        for _ in 0..3 {
            assert!(future.as_mut().poll(&mut cx).is_pending());
        }
        assert_eq!(polls.load(Ordering::SeqCst), 1, "wake-ups of others cost it no poll");
        // Its own wake-up wakes the task and lets the next poll through.
        ready.store(true, Ordering::SeqCst);
        waker.lock().unwrap().take().expect("the inner future left its waker").wake();
        assert!(task_woken.0.load(Ordering::SeqCst), "the task is woken");
        assert!(future.as_mut().poll(&mut cx).is_ready());
        assert_eq!(polls.load(Ordering::SeqCst), 2);
    }

    #[derive(Default)]
    struct TaskWoken(AtomicBool);

    impl Wake for TaskWoken {
        fn wake(self: Arc<Self>) {
            self.0.store(true, Ordering::SeqCst);
        }
    }

    #[test]
    fn what_is_ready_before_the_first_poll_is_seen_by_it() {
        let token = tokio_util::sync::CancellationToken::new();
        token.cancel();
        let mut future = std::pin::pin!(WhenWoken::new(token.cancelled()));
        let task_waker = Waker::from(Arc::new(TaskWoken::default()));
        assert!(future.as_mut().poll(&mut Context::from_waker(&task_waker)).is_ready());
    }

    /// Wakes itself while polled (as tokio's budget does) and is ready on its second poll.
    struct WakesItself(bool);

    impl Future for WakesItself {
        type Output = ();
        fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
            if self.0 {
                return Poll::Ready(());
            }
            self.0 = true;
            cx.waker().wake_by_ref();
            Poll::Pending
        }
    }

    #[test]
    fn a_wake_up_made_while_it_is_polled_lets_the_next_poll_through() {
        let task_woken = Arc::new(TaskWoken::default());
        let task_waker = Waker::from(task_woken.clone());
        let mut future = std::pin::pin!(WhenWoken::new(WakesItself(false)));
        assert!(future.as_mut().poll(&mut Context::from_waker(&task_waker)).is_pending());
        assert!(task_woken.0.load(Ordering::SeqCst), "the task is woken");
        assert!(future.as_mut().poll(&mut Context::from_waker(&task_waker)).is_ready());
    }
}
