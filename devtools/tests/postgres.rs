//! The databases `fresh_database` made under a prefix are dropped by `drop_databases`, on this
//! machine's PostgreSQL, but for one still in use and those of a prefix that only starts alike.

use std::sync::mpsc;

use devtools::postgres::{drop_databases, fresh_database, with_postgres, LOCAL};

/// The name of the database at `url`.
fn name(url: &str) -> String {
    url.rsplit('/').next().unwrap_or_default().to_string()
}

/// Whether the server has a database named `name`.
fn exists(name: &str) -> bool {
    let name = name.to_string();
    with_postgres(&format!("{LOCAL}/postgres"), |client| async move {
        client
            .query("SELECT 1 FROM pg_database WHERE datname = $1", &[&name])
            .await
            .map(|rows| !rows.is_empty())
    })
    .expect("PostgreSQL answers")
    .expect("pg_database is read")
}

#[test]
fn a_prefixs_databases_are_dropped_but_one_in_use_and_another_prefixs() {
    let free = fresh_database(LOCAL, "idem_test_drop").expect("a database");
    let busy = fresh_database(LOCAL, "idem_test_drop").expect("a database");
    // `_` matches any character in LIKE: unescaped, `idem_test_drop_%` would match this one.
    let alike = fresh_database(LOCAL, "idem_test_dropx").expect("a database");

    // A connection holds `busy` open until told to let go.
    let (connected, is_connected) = mpsc::channel();
    let (release, released) = tokio::sync::oneshot::channel::<()>();
    let holder = std::thread::spawn({
        let busy = busy.clone();
        move || {
            with_postgres(&busy, move |client| async move {
                let _ = connected.send(());
                let _ = released.await;
                drop(client);
            })
        }
    });
    is_connected.recv().expect("the holder connects");

    drop_databases(LOCAL, "idem_test_drop").expect("the databases are listed");
    let (free_left, busy_left, alike_left) = (
        exists(&name(&free)),
        exists(&name(&busy)),
        exists(&name(&alike)),
    );

    let _ = release.send(());
    let _ = holder.join();
    drop_databases(LOCAL, "idem_test_drop").expect("the databases are listed");
    drop_databases(LOCAL, "idem_test_dropx").expect("the databases are listed");

    assert!(!free_left, "a database of the prefix is dropped");
    assert!(busy_left, "one in use is left");
    assert!(alike_left, "one of a prefix that only starts alike is left");
    assert!(!exists(&name(&busy)) && !exists(&name(&alike)));
}
