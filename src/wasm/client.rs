//! The browser's host and the client: the core's [`Driver`] over IndexedDB,
//! a transport, and Web Locks, `BroadcastChannel`, `gloo-timers` and
//! Background Sync. Nothing here decides anything: the loop is the driver's.

use std::cell::RefCell;
use std::rc::{Rc, Weak};

use js_sys::{Function, Reflect};
use wasm_bindgen::prelude::*;
use wasm_bindgen::JsCast;

use crate::driver::{Driver, Host, Listener, Options, Task};
use crate::engine::Config;
use crate::store::Txn;

pub use crate::driver::{ClientError, Edit, SyncOutcome};

use super::idb_store::IdbStore;
use super::transport::Transport;

/// The handler of the database's BroadcastChannel, kept alive with the host.
type MessageHandler = Closure<dyn FnMut(web_sys::MessageEvent)>;

/// The client of one local database in a page or a worker.
pub type Client<T> = Driver<IdbStore, T, BrowserHost>;

/// Milliseconds since the epoch, from the JS clock.
pub fn now() -> u64 {
    js_sys::Date::now() as u64
}

/// 64 random bits from `crypto.getRandomValues`, or `Math.random` where absent.
pub fn entropy() -> u64 {
    let mut b = [0u8; 8];
    if fill_random(&mut b) {
        return u64::from_le_bytes(b);
    }
    ((js_sys::Math::random() * 4294967296.0) as u64) << 32 | (js_sys::Math::random() * 4294967296.0) as u64
}

fn fill_random(buf: &mut [u8]) -> bool {
    let Ok(crypto) = Reflect::get(&js_sys::global(), &"crypto".into()) else {
        return false;
    };
    let Ok(crypto) = crypto.dyn_into::<web_sys::Crypto>() else {
        return false;
    };
    crypto.get_random_values_with_u8_array(buf).is_ok()
}

#[wasm_bindgen(inline_js = r#"
export function acquire_lock(name, if_available) {
  const locks = globalThis.navigator && globalThis.navigator.locks;
  if (!locks) return Promise.resolve(() => {});
  return new Promise((granted, failed) => {
    const options = if_available ? { ifAvailable: true } : {};
    locks.request(name, options, (lock) => (lock ? new Promise((release) => granted(release)) : granted(null))).catch(failed);
  });
}
export function report_error(e) {
  try { if (typeof globalThis.reportError === 'function') globalThis.reportError(e); } catch (_) { /* nowhere to report */ }
}
export function register_background_sync(tag) {
  try {
    const sw = globalThis.navigator && globalThis.navigator.serviceWorker;
    if (!sw || typeof globalThis.document === 'undefined' || !sw.controller) return;
    sw.ready.then((r) => r.sync && r.sync.register(tag)).catch(() => {});
  } catch (_) { /* no Background Sync here: the page retries on its own */ }
}
"#)]
extern "C" {
    /// Asks for the Web Lock `name` (where Web Locks exist): resolves, once
    /// granted, to the function that releases it; with `if_available`, to
    /// `null` at once if someone holds it.
    fn acquire_lock(name: &str, if_available: bool) -> js_sys::Promise;
    /// From a page controlled by a Service Worker: asks for a Background Sync with `tag`.
    fn register_background_sync(tag: &str);
    /// Reports what a listener threw as the platform does for an event
    /// listener (`reportError`: the global `error` event, the console).
    pub(super) fn report_error(e: &JsValue);
}

/// Whether a page knows it is offline (`navigator.onLine === false`). Only
/// pages skip their attempts: they hear `online` and try again at once. A
/// worker's view of `onLine` can lag behind the network coming back, and a
/// Background Sync event only fires when the browser is online anyway.
fn offline() -> bool {
    let global = js_sys::global();
    if Reflect::get(&global, &"document".into()).map_or(true, |d| d.is_undefined()) {
        return false;
    }
    Reflect::get(&global, &"navigator".into())
        .and_then(|n| Reflect::get(&n, &"onLine".into()))
        .map(|v| v == JsValue::FALSE)
        .unwrap_or(false)
}

/// Holds the database's Web Lock until dropped.
pub struct LockGuard(Option<Function>);

impl Drop for LockGuard {
    fn drop(&mut self) {
        if let Some(release) = self.0.take() {
            let _ = release.call0(&JsValue::NULL);
        }
    }
}

/// A page's or a worker's host: the Web Lock and the BroadcastChannel
/// `marksync:<name>`, timers, `crypto`, `navigator.onLine`, Background Sync.
pub struct BrowserHost {
    name: String,
    channel: Option<web_sys::BroadcastChannel>,
    on_message: RefCell<Option<MessageHandler>>,
}

impl BrowserHost {
    /// The host of database `name`.
    pub fn new(name: &str) -> BrowserHost {
        let channel = web_sys::BroadcastChannel::new(&Self::tag(name)).ok();
        BrowserHost { name: name.to_owned(), channel, on_message: RefCell::new(None) }
    }

    /// The one name of the database's lock, channel and sync tag.
    pub fn tag(name: &str) -> String {
        format!("marksync:{name}")
    }

    /// Hands what other contexts commit to `client`.
    fn listen<T: Transport + 'static>(&self, client: &Rc<Client<T>>) {
        let Some(ch) = &self.channel else { return };
        let weak: Weak<Client<T>> = Rc::downgrade(client);
        let cb = Closure::<dyn FnMut(web_sys::MessageEvent)>::new(move |ev: web_sys::MessageEvent| {
            let (Some(me), Some(text)) = (weak.upgrade(), ev.data().as_string()) else { return };
            match crate::told::heard(&text) {
                Some(txn) => me.absorb(&txn),
                None => me.absorb_unreadable(),
            }
        });
        ch.set_onmessage(Some(cb.as_ref().unchecked_ref()));
        *self.on_message.borrow_mut() = Some(cb);
    }
}

impl Host for BrowserHost {
    type Guard = LockGuard;
    type Sleep = gloo_timers::future::TimeoutFuture;

    async fn lock(&self, if_available: bool) -> Result<Option<LockGuard>, String> {
        let granted = wasm_bindgen_futures::JsFuture::from(acquire_lock(&Self::tag(&self.name), if_available))
            .await
            .map_err(|e| super::transport::js_text(&e))?;
        Ok(granted.dyn_into::<Function>().ok().map(|release| LockGuard(Some(release))))
    }

    fn broadcast(&self, txn: &Txn) {
        if let Some(ch) = &self.channel {
            let _ = ch.post_message(&JsValue::from_str(&crate::told::tell(txn)));
        }
    }

    fn now(&self) -> u64 {
        now()
    }

    fn entropy(&self) -> u64 {
        entropy()
    }

    fn offline(&self) -> bool {
        offline()
    }

    fn label(&self) -> &'static str {
        let global = js_sys::global();
        if Reflect::get(&global, &"document".into()).map_or(true, |d| d.is_undefined()) {
            "worker"
        } else {
            "tab"
        }
    }

    fn wake_when_online(&self) {
        register_background_sync(&Self::tag(&self.name));
    }

    fn sleep(&self, ms: u64) -> Self::Sleep {
        gloo_timers::future::TimeoutFuture::new(ms.min(u32::MAX as u64) as u32)
    }

    fn spawn(&self, task: Task) {
        wasm_bindgen_futures::spawn_local(task);
    }

    fn close(&self) {
        if let Some(ch) = &self.channel {
            ch.set_onmessage(None);
            ch.close();
        }
        self.on_message.borrow_mut().take();
    }
}

impl<T: Transport + 'static> Driver<IdbStore, T, BrowserHost> {
    /// Opens (or creates) the local database `name` and loads it.
    /// `resume_exhausted`: lift a stop for exhausted retries (an app's open
    /// does; the Service Worker's does not, so it never resumes sending alone).
    /// `lazy`: the store reads no chunk at open, and rows are read as steps
    /// ask for them (PROTOCOL §7, "The lazy store"; the Service Worker's).
    pub async fn open(
        name: &str,
        transport: T,
        config: Config,
        auto_sync: bool,
        resume_exhausted: bool,
        user: Option<&str>,
        lazy: bool,
    ) -> Result<Rc<Self>, ClientError> {
        let store = IdbStore::connect(name).await?;
        store.open_lazily(lazy);
        let options = Options { config, auto_sync, resume_exhausted, user: user.map(str::to_owned) };
        let client = Driver::start(store, transport, BrowserHost::new(name), options).await?;
        client.host.listen(&client);
        // The connection closed under the library heals at once, not at the context's next call.
        let weak = Rc::downgrade(&client);
        client.store.on_lost(Rc::new(move || {
            let Some(me) = weak.upgrade() else { return };
            wasm_bindgen_futures::spawn_local(async move {
                let _ = me.recover_storage().await;
            });
        }));
        Ok(client)
    }

    /// Calls a JS listener function (helper for the bindings).
    pub fn js_listener(f: Function) -> Listener {
        Rc::new(move || {
            // The other listeners are still told; the app hears of its bug.
            if let Err(e) = f.call0(&JsValue::NULL) {
                report_error(&e);
            }
        })
    }
}
