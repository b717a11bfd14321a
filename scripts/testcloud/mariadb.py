"""The test cloud's database server: Debian's MariaDB, one server per cloud, as kolla-ansible deploys it.

kolla-ansible runs every OpenStack service on MariaDB (``[database] connection =
mysql+pymysql://<user>:<password>@<address>/<database>``, one database and one user per service, the server
set to ``character-set-server = utf8``, ``collation-server = utf8_general_ci``,
``innodb_autoinc_lock_mode = 2``, ``innodb_flush_log_at_trx_commit = 0``: its galera.cnf). The test cloud
does the same with Debian's ``mariadb-server``, on 127.0.0.1 and a free port, data directory, socket,
configuration and log under the cloud's directory:

    DIR/etc/mariadb/my.cnf   DIR/data/mariadb/ (datadir; mysqld.sock)   DIR/log/mariadb.log

``root`` logs in through the socket only (unix_socket authentication for the user running the cloud);
each service's user logs in over TCP with the password in ``DIR/secrets.json``. What is not kolla's: no
Galera, no binary log, a small buffer pool and redo log, and no fsync (``innodb_flush_method = nosync``,
``sync_binlog`` moot): a test server's data need not survive a power cut, its start and its schema loads
must be cheap.
"""

import hashlib
import os
import subprocess
import tempfile
import time

import debian
from logtail import tail

MARIADBD = "/usr/sbin/mariadbd"
INSTALL_DB = "/usr/bin/mariadb-install-db"
CLIENT = "/usr/bin/mariadb"
DUMP = "/usr/bin/mariadb-dump"
PACKAGES = ["mariadb-server", "mariadb-client"]

# database: its user (kolla-ansible's <service>_database_name and _user; nova_cell0 belongs to nova's user).
DATABASES = {
    "keystone": "keystone",
    "nova_api": "nova_api",
    "nova": "nova",
    "nova_cell0": "nova",
    "glance": "glance",
    "placement": "placement",
}
USERS = tuple(dict.fromkeys(DATABASES.values()))
SOCKET_MAX = 107  # sun_path holds 108 bytes with its NUL


class DatabaseError(Exception):
    """A failure with a message meant for the operator; testcloud.py turns it into its CloudError."""


class MariaDB:
    """Configuration, initialisation, SQL, dumps and loads of one test cloud's MariaDB server."""

    def __init__(self, cloud_dir, data, etc, logs):
        self.datadir = os.path.join(data, "mariadb")
        self.conf = os.path.join(etc, "mariadb", "my.cnf")
        self.log = os.path.join(logs, "mariadb.log")
        self.init_log = os.path.join(logs, "init.log")
        self.socket = os.path.join(self.datadir, "mysqld.sock")
        if len(self.socket.encode()) > SOCKET_MAX:
            # A deep cloud directory: the socket goes to a private folder of its own, named after the directory.
            digest = hashlib.sha256(os.path.abspath(cloud_dir).encode()).hexdigest()[:16]
            self.socket = os.path.join(tempfile.gettempdir(), f"ogc-testcloud-{digest}", "mysqld.sock")
        self.port = None

    # ---- configuration --------------------------------------------------------------
    def ensure_installed(self):
        """Debian's MariaDB server and client, installed with apt-get when missing (debian.py)."""
        try:
            debian.ensure_installed([MARIADBD, INSTALL_DB, CLIENT, DUMP], PACKAGES, self.init_log)
        except debian.PackageError as exc:
            raise DatabaseError(str(exc)) from None

    def write_config(self, port, write_file):
        self.port = port
        for folder in (os.path.dirname(self.conf), os.path.dirname(self.socket)):
            os.makedirs(folder, mode=0o700, exist_ok=True)
        write_file(self.conf, f"""# The test cloud's MariaDB (scripts/testcloud/mariadb.py): 127.0.0.1 only.
[client]
socket = {self.socket}
port = {port}
default-character-set = utf8
[mysqld]
datadir = {self.datadir}
socket = {self.socket}
bind-address = 127.0.0.1
port = {port}
pid-file = {self.datadir}/mariadbd.pid
log-error = {self.log}
skip-name-resolve
# As kolla-ansible's galera.cnf:
default-storage-engine = innodb
character-set-server = utf8
collation-server = utf8_general_ci
innodb_autoinc_lock_mode = 2
innodb_flush_log_at_trx_commit = 0
max_connections = 1000
# A test server: no binary log, small caches, no fsync.
skip-log-bin
innodb_buffer_pool_size = 64M
innodb_log_file_size = 16M
innodb_flush_method = nosync
innodb_doublewrite = 0
innodb_file_per_table = OFF  # one tablespace: a schema load creates no file per table (bench/testcloud)
""")

    def url(self, database, password):
        """The connection URL a service's configuration gets, as kolla-ansible writes it."""
        return f"mysql+pymysql://{DATABASES[database]}:{password}@127.0.0.1:{self.port}/{database}"

    # ---- the server -------------------------------------------------------------------
    def _user_args(self):
        # mariadbd refuses to run as root unless told to; otherwise it runs as whoever starts it.
        return ["--user=root"] if os.geteuid() == 0 else []

    def install(self):
        """The system tables, once per data directory (mariadb-install-db)."""
        if os.path.isdir(os.path.join(self.datadir, "mysql")):
            return
        os.makedirs(self.datadir, mode=0o700, exist_ok=True)
        user = "root" if os.geteuid() == 0 else _login()
        self._run([INSTALL_DB, f"--defaults-file={self.conf}", *self._user_args(), "--skip-test-db",
                   "--auth-root-authentication-method=socket", f"--auth-root-socket-user={user}"],
                  "creating the system tables")

    def argv(self):
        """The server's command line (run in the foreground under the cloud's supervisor)."""
        return [MARIADBD, f"--defaults-file={self.conf}", *self._user_args()]

    def wait_ready(self, proc, deadline, failed):
        """Until root can log in through the socket; FAILED(why) builds the error when it cannot."""
        import pymysql  # the services venv  # pylint: disable=import-outside-toplevel

        last = "no answer yet"
        while time.time() < deadline:
            if proc.poll() is not None:
                raise failed(f"exited with status {proc.returncode} during start-up")
            try:
                pymysql.connect(unix_socket=self.socket, user="root", connect_timeout=2).close()
                return
            except pymysql.MySQLError as exc:
                last = str(exc)
            time.sleep(0.1)
        raise failed(f"did not accept connections on {self.socket} in time ({last})")

    # ---- SQL ----------------------------------------------------------------------------
    def connect(self, database=None):
        import pymysql  # pylint: disable=import-outside-toplevel

        return pymysql.connect(unix_socket=self.socket, user="root", database=database, autocommit=True)

    def execute(self, statements, database=None):
        """Run each (sql, params) as root; returns the last statement's affected row count."""
        import pymysql  # pylint: disable=import-outside-toplevel

        try:
            con = self.connect(database)
            try:
                with con.cursor() as cur:
                    count = 0
                    for sql, params in statements:
                        count = cur.execute(sql, params)
                    return count
            finally:
                con.close()
        except pymysql.MySQLError as exc:
            raise DatabaseError(f"MariaDB ({self.socket}) refused {statements[-1][0].split()[0]}: {exc}; its log: "
                                f"{self.log}") from None

    def create_databases(self, passwords):
        """Every service's database and user, the user's password (PASSWORDS[user]) and grants: idempotent."""
        statements = []
        for database in DATABASES:
            statements.append((f"CREATE DATABASE IF NOT EXISTS `{database}`", None))
        for user in USERS:
            for host in ("localhost", "127.0.0.1"):
                statements.append(("CREATE USER IF NOT EXISTS %s@%s IDENTIFIED BY %s", (user, host, passwords[user])))
                statements.append(("ALTER USER %s@%s IDENTIFIED BY %s", (user, host, passwords[user])))
        for database, user in DATABASES.items():
            for host in ("localhost", "127.0.0.1"):
                statements.append((f"GRANT ALL PRIVILEGES ON `{database}`.* TO %s@%s", (user, host)))
        self.execute(statements)

    def empty(self, database):
        """Drop and create DATABASE again (its user's grant stays: it names the database, not its tables)."""
        self.execute([(f"DROP DATABASE IF EXISTS `{database}`", None), (f"CREATE DATABASE `{database}`", None)])

    def dump(self, database, path):
        """DATABASE's tables and rows, as SQL, to PATH (written whole, then renamed: clouds may start side by side)."""
        tmp = f"{path}.{os.getpid()}.tmp"
        with open(tmp, "w", encoding="utf-8") as out:
            self._run([DUMP, f"--defaults-file={self.conf}", "--user=root", "--single-transaction",
                       "--skip-dump-date", "--skip-comments", database], f"dumping {database}", stdout=out)
        os.replace(tmp, path)

    def load(self, database, path):
        """Run the SQL of PATH (a dump) in DATABASE."""
        with open(path, encoding="utf-8") as source:
            self._run([CLIENT, f"--defaults-file={self.conf}", "--user=root", database], f"loading {path} into "
                      f"{database}", stdin=source)

    def _run(self, argv, what, stdin=None, stdout=None):
        with open(self.init_log, "a", encoding="utf-8") as log:
            log.write(f"\n$ {' '.join(argv)}\n")
            log.flush()
            proc = subprocess.run(argv, stdin=stdin if stdin is not None else subprocess.DEVNULL,
                                  stdout=stdout or log, stderr=log, check=False)
        if proc.returncode:
            raise DatabaseError(f"MariaDB: {what}: `{' '.join(argv)}` exited {proc.returncode}; see {self.init_log}"
                                f"\n{tail(self.init_log)}")


def _login():
    import pwd  # pylint: disable=import-outside-toplevel

    return pwd.getpwuid(os.geteuid()).pw_name
