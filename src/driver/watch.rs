//! Live queries: a query whose listener hears each new result — and only a
//! new one. After every committed step the engine says which visible rows
//! changed; a live query of a table none of them is in is not run again,
//! and one that runs again but answers the same rows (the same values) is
//! not heard.

use std::cell::{Cell, RefCell};
use std::rc::Rc;

use super::{Driver, Host, LocalStore, Transport};
use crate::engine::Changes;
use crate::protocol::{Row, RowKey};
use crate::query::{Moved, Query};

/// Hears a live query's results.
pub type WatchListener = Rc<dyn Fn(&[(RowKey, Row)])>;

struct Watch {
    id: u32,
    table: String,
    query: Query,
    /// The result last heard; `None` until the first.
    last: Option<Vec<(RowKey, Row)>>,
    listener: WatchListener,
    /// Runs read from the indexes on disk started so far: only the latest
    /// one's answer is heard (an earlier one may come back later).
    runs: u32,
    /// Whether `last` is the answer as of every change told so far (no read
    /// under way): a change of a few known rows then updates it in memory.
    exact: bool,
}

/// The live queries of one context.
#[derive(Default)]
pub struct Watches {
    list: RefCell<Vec<Watch>>,
    next: Cell<u32>,
    /// Answers read from the indexes on disk that a step updated without a read.
    updated: Cell<u64>,
    /// The last answers read from the indexes on disk, kept as live queries
    /// with no listener: asked again, they are answered from memory.
    answers: RefCell<Vec<Answer>>,
    /// Counts the changes told: an answer read while one was told is not kept.
    told: Cell<u64>,
    /// Queries answered from an answer kept.
    served: Cell<u64>,
}

/// A query's answer kept exact as steps change its rows ([`crate::query::update`]).
struct Answer {
    table: String,
    query: Query,
    rows: Vec<(RowKey, Row)>,
}

/// The most rows the answers kept hold together (a few screens' pages,
/// ≈ 0.5 MB): the answers asked longest ago go first; a longer answer is
/// not kept.
const ROWS_KEPT: usize = 4096;

/// Whether two results show the app the same rows (marks may differ).
fn same(a: &[(RowKey, Row)], b: &[(RowKey, Row)]) -> bool {
    a.len() == b.len()
        && a.iter().zip(b).all(|((ka, ra), (kb, rb))| {
            ka == kb
                && ra.cells.len() == rb.cells.len()
                && ra.cells.iter().zip(rb.cells.iter()).all(|((fa, ca), (fb, cb))| fa == fb && ca.value == cb.value)
        })
}

impl Watches {
    /// Drops every live query (the database closed).
    pub fn clear(&self) {
        self.list.borrow_mut().clear();
        self.answers.borrow_mut().clear();
    }

    /// Brings the answers kept up to `changes`: each worked out anew, or
    /// dropped when that cannot be known.
    fn follow(&self, changes: &Changes) {
        if changes.is_empty() {
            return;
        }
        self.told.set(self.told.get() + 1);
        self.answers.borrow_mut().retain_mut(|a| {
            if !changes.touches(&a.table) {
                return true;
            }
            let Some(told) = changes.rows_of(&a.table) else { return false };
            match crate::query::moved(&a.query, &a.rows, told) {
                Moved::Not => true,
                Moved::To(rows) => {
                    a.rows = rows;
                    true
                }
                Moved::Unknown => false,
            }
        });
    }

    /// The answer kept for `q`, if any (then kept longest).
    pub(super) fn answer(&self, table: &str, q: &Query) -> Option<Vec<(RowKey, Row)>> {
        let mut answers = self.answers.borrow_mut();
        let at = answers.iter().position(|a| a.table == table && a.query == *q)?;
        let a = answers.remove(at);
        let rows = a.rows.clone();
        answers.push(a);
        self.served.set(self.served.get() + 1);
        Some(rows)
    }

    /// Where the changes told stand: an answer read from here is kept by
    /// [`Watches::keep`] only if none was told meanwhile.
    pub(super) fn told(&self) -> u64 {
        self.told.get()
    }

    /// Keeps `rows`, `q`'s answer read since `told` (none if changes were told since).
    pub(super) fn keep(&self, told: u64, table: &str, q: &Query, rows: &[(RowKey, Row)]) {
        if told != self.told.get() {
            return;
        }
        let mut answers = self.answers.borrow_mut();
        answers.retain(|a| !(a.table == table && a.query == *q));
        if rows.len() > ROWS_KEPT {
            return;
        }
        let mut held: usize = answers.iter().map(|a| a.rows.len()).sum::<usize>() + rows.len();
        while held > ROWS_KEPT && !answers.is_empty() {
            held -= answers.remove(0).rows.len();
        }
        answers.push(Answer { table: table.to_owned(), query: q.clone(), rows: rows.to_vec() });
    }
}

impl<S: LocalStore + 'static, T: Transport + 'static, H: Host + 'static> Driver<S, T, H> {
    /// Starts a live query: `listener` hears its first result soon (not
    /// within this call), then each result that differs from the last.
    /// Returns its id for [`Driver::unwatch`].
    pub fn watch(self: &Rc<Self>, table: &str, query: Query, listener: WatchListener) -> u32 {
        let id = self.watches.next.get() + 1;
        self.watches.next.set(id);
        // Over a lazy store whose indexes are kept on disk, read from them;
        // else over a lazy store, its table is read first (and kept whole).
        let on_disk = self.engine.borrow().lazy_query(table, &query).is_some();
        self.watches.list.borrow_mut().push(Watch { id, table: table.to_owned(), query, last: None, listener, runs: 0, exact: false });
        let (me, table) = (self.clone(), table.to_owned());
        self.host.spawn(Box::pin(async move {
            if on_disk || me.ensure_table(&table).await.is_ok() {
                me.refresh(Some(id));
            }
        }));
        id
    }

    /// How many live answers read from the indexes on disk were updated
    /// from the rows a step changed, without a read.
    pub fn live_updates(&self) -> u64 {
        self.watches.updated.get()
    }

    /// How many queries over the indexes on disk were answered from an
    /// answer kept, without a read.
    pub fn answers_kept_served(&self) -> u64 {
        self.watches.served.get()
    }

    /// Stops a live query (again: nothing).
    pub fn unwatch(&self, id: u32) {
        self.watches.list.borrow_mut().retain(|w| w.id != id);
    }

    /// After a committed step: runs again every live query a change may
    /// touch, and tells the ones whose result moved.
    pub(super) fn refresh_watches(&self) {
        self.refresh(None);
    }

    /// `first`: only that live query, which has not been heard yet.
    fn refresh(&self, first: Option<u32>) {
        if self.closed.get() {
            return;
        }
        // A first run reads the rows as they are and leaves the changes to
        // the step that made them (the other live queries still need them).
        let changes: Changes = if first.is_some() { Changes::default() } else { self.engine.borrow_mut().take_changes() };
        self.watches.follow(&changes);
        let due = |w: &Watch| match first {
            Some(id) => w.id == id && w.last.is_none(),
            // (A live query read from disk may be under way to its first result.)
            None => (w.last.is_some() || w.runs > 0) && changes.touches(&w.table),
        };
        self.run_watches(&due, first.is_none().then_some(&changes));
    }

    /// Runs again the live queries `due` names and tells the ones whose
    /// result moved. A live query whose table is not all held (a reopened
    /// engine over a lazy store) runs once its rows are read; one read from
    /// the indexes on disk is updated from the `changes` without a read when
    /// they are few and known ([`crate::query::update`]), else read again.
    fn run_watches(&self, due: &dyn Fn(&Watch) -> bool, changes: Option<&Changes>) {
        let mut heard: Vec<(WatchListener, Vec<(RowKey, Row)>)> = Vec::new();
        let mut unread: Vec<String> = Vec::new();
        let mut on_disk: Vec<(u32, u32, String, Query)> = Vec::new();
        {
            let mut list = self.watches.list.borrow_mut();
            for w in list.iter_mut() {
                if !due(w) {
                    continue;
                }
                let held = {
                    let e = self.engine.borrow();
                    e.missing(vec![crate::store::Want::table(&w.table)]).is_empty()
                };
                if !held {
                    if self.engine.borrow().lazy_query(&w.table, &w.query).is_some() {
                        let told = changes.and_then(|c| c.rows_of(&w.table)).filter(|_| w.exact);
                        if let (Some(told), Some(last)) = (told, w.last.as_deref()) {
                            let moved = crate::query::moved(&w.query, last, told);
                            if !matches!(moved, Moved::Unknown) {
                                self.watches.updated.set(self.watches.updated.get() + 1);
                            }
                            match moved {
                                Moved::Not => continue,
                                Moved::To(rows) => {
                                    if !same(last, &rows) {
                                        w.last = Some(rows.clone());
                                        heard.push((w.listener.clone(), rows));
                                    }
                                    continue;
                                }
                                Moved::Unknown => {}
                            }
                        }
                        w.runs += 1;
                        w.exact = false;
                        on_disk.push((w.id, w.runs, w.table.clone(), w.query.clone()));
                    } else if !unread.contains(&w.table) {
                        unread.push(w.table.clone());
                    }
                    continue;
                }
                let rows = self.engine.borrow_mut().query(&w.table, &w.query);
                if w.last.as_deref().is_some_and(|l| same(l, &rows)) {
                    continue;
                }
                w.last = Some(rows.clone());
                heard.push((w.listener.clone(), rows));
            }
        }
        if let (false, Some(me)) = (unread.is_empty(), self.me.upgrade()) {
            self.host.spawn(Box::pin(async move {
                for t in &unread {
                    if me.ensure_table(t).await.is_err() {
                        return;
                    }
                }
                me.run_watches(&|w| w.last.is_some() && unread.contains(&w.table), None);
            }));
        }
        if let (false, Some(me)) = (on_disk.is_empty(), self.me.upgrade()) {
            self.host.spawn(Box::pin(async move {
                for (id, run, table, query) in on_disk {
                    // A read that fails is tried again after the next step.
                    let Ok(Some(rows)) = me.query_on_disk(&table, &query).await else { continue };
                    let listener = {
                        let mut list = me.watches.list.borrow_mut();
                        let Some(w) = list.iter_mut().find(|w| w.id == id && w.runs == run) else { continue };
                        w.exact = true;
                        if w.last.as_deref().is_some_and(|l| same(l, &rows)) {
                            continue;
                        }
                        w.last = Some(rows.clone());
                        w.listener.clone()
                    };
                    if !me.closed.get() {
                        listener(&rows);
                    }
                }
            }));
        }
        // Listeners run with nothing borrowed: they may read, watch or unwatch.
        for (l, rows) in heard {
            l(&rows);
        }
    }
}
