;; A check of a rendered seatbelt profile in TinyScheme, the interpreter libsandbox embeds: every top-level
;; form is read as Scheme, (version 1) comes first and (deny default) second, every other form is an allow
;; or a deny of known operations with well-formed filters, every (param "NAME") is defined, and every
;; defined parameter is used. It cannot tell whether macOS accepts each operation on each version; a Mac
;; does (profiles/README.md).
;;
;; Use: a driver file defines *profile-file* (the profile's path) and *params* (an association list of
;; ("NAME" . "value") strings, the -D definitions), loads this file, and runs (check-profile). The check
;; prints one line per problem and a last line "sbpl-check: ok (N forms)" or "sbpl-check: N problem(s)".
;; (Written for Debian's tinyscheme 1.42, whose string-ref, string=? and equal? on strings fail: strings are
;; compared as interned symbols.)

(define (same-string? a b) (eq? (string->symbol a) (string->symbol b)))

(define (absolute-path? s)
  (and (string? s) (> (string-length s) 0) (same-string? (substring s 0 1) "/")))

;; Operations of macOS's sandbox (those its profiles use; a wildcard covers its family).
(define *operations*
  '(default
    file* file-chroot file-clone file-ioctl file-issue-extension file-link file-map-executable file-mknod
    file-mount file-mount-update file-read* file-read-data file-read-metadata file-read-xattr file-revoke
    file-search file-test-existence file-unmount file-write* file-write-acl file-write-create file-write-data
    file-write-flags file-write-mode file-write-owner file-write-setugid file-write-times file-write-unlink
    file-write-xattr
    iokit* iokit-get-properties iokit-issue-extension iokit-open iokit-open-service iokit-open-user-client
    iokit-set-properties
    ipc* ipc-posix* ipc-posix-sem ipc-posix-shm* ipc-posix-shm-read* ipc-posix-shm-read-data
    ipc-posix-shm-write* ipc-posix-shm-write-create ipc-posix-shm-write-data ipc-posix-shm-write-unlink
    ipc-sysv* ipc-sysv-msg ipc-sysv-sem ipc-sysv-shm
    mach* mach-bootstrap mach-host* mach-lookup mach-per-user-lookup mach-priv* mach-priv-host-port
    mach-priv-task-port mach-register mach-task-name
    network* network-bind network-inbound network-outbound
    nvram* nvram-delete nvram-get nvram-set
    process* process-exec* process-exec process-exec-interpreter process-fork process-info*
    process-info-codesignature process-info-dirtycontrol process-info-ledger process-info-listpids
    process-info-pidfdinfo process-info-pidfileportinfo process-info-pidinfo process-info-rusage
    process-info-setcontrol
    pseudo-tty signal
    system* system-acct system-audit system-fsctl system-info system-mac-syscall system-privilege
    system-sched system-socket
    sysctl* sysctl-read sysctl-write
    user-preference* user-preference-read user-preference-write
    appleevent-send distributed-notification-post job-creation lsopen))

(define *problems* 0)
(define (problem . words)
  (set! *problems* (+ *problems* 1))
  (display "sbpl-check: ")
  (for-each display words)
  (newline))

(define *used* '())

(define (param-value name)
  (let loop ((params *params*))
    (cond ((null? params) #f)
          ((same-string? (car (car params)) name) (cdr (car params)))
          (else (loop (cdr params))))))

;; A path argument: an absolute string, or (param "NAME") whose -D value is absolute.
(define (check-path-argument filter argument)
  (cond ((absolute-path? argument) #t)
        ((and (pair? argument) (eq? (car argument) 'param) (pair? (cdr argument)) (string? (cadr argument))
              (null? (cddr argument)))
         (let ((value (param-value (cadr argument))))
           (set! *used* (cons (string->symbol (cadr argument)) *used*))
           (cond ((not value) (problem "(param \"" (cadr argument) "\") is not defined, in " filter))
                 ((not (absolute-path? value))
                  (problem "parameter " (cadr argument) " is not an absolute path: " value)))))
        (else (problem "not an absolute path or a (param \"NAME\"): " argument " in " filter))))

(define (check-one-string filter)
  (if (not (and (pair? (cdr filter)) (string? (cadr filter)) (null? (cddr filter))))
      (problem "expected one string: " filter)))

(define (check-filter filter)
  (if (not (pair? filter))
      (problem "a filter must be a list: " filter)
      (let ((head (car filter)) (arguments (cdr filter)))
        (cond ((memq head '(literal subpath prefix path))
               (if (and (pair? arguments) (null? (cdr arguments)))
                   (check-path-argument filter (car arguments))
                   (problem "expected one path: " filter)))
              ((memq head '(regex sysctl-name sysctl-name-prefix global-name local-name
                            iokit-registry-entry-class extension))
               (check-one-string filter))
              ((eq? head 'target)
               (if (not (and (pair? arguments) (memq (car arguments) '(self same-sandbox others))
                             (null? (cdr arguments))))
                   (problem "target takes self, same-sandbox or others: " filter)))
              ((eq? head 'vnode-type)
               (if (not (and (pair? arguments) (symbol? (car arguments))))
                   (problem "vnode-type takes a type: " filter)))
              ((memq head '(require-all require-any))
               (for-each check-filter arguments))
              ((eq? head 'require-not)
               (if (and (pair? arguments) (null? (cdr arguments)))
                   (check-filter (car arguments))
                   (problem "require-not takes one filter: " filter)))
              ((eq? head 'with) #t)
              (else (problem "unknown filter " head " in " filter))))))

;; (allow|deny operation... filter...): at least one operation, all known, before any filter.
(define (check-rule form)
  (let loop ((rest (cdr form)) (operations 0))
    (cond ((null? rest)
           (if (= operations 0) (problem "a rule without an operation: " form)))
          ((symbol? (car rest))
           (if (not (memq (car rest) *operations*))
               (problem "unknown operation " (car rest) " in " form))
           (loop (cdr rest) (+ operations 1)))
          (else
           (if (= operations 0) (problem "a rule without an operation: " form))
           (for-each check-filter rest)))))

(define (check-form form index)
  (cond ((not (pair? form)) (problem "top-level form " index " is not a list: " form))
        ((and (= index 0) (not (and (eq? (car form) 'version) (pair? (cdr form)) (eqv? (cadr form) 1)
                                    (null? (cddr form)))))
         (problem "the first form must be (version 1), not " form))
        ((and (= index 1) (not (and (eq? (car form) 'deny) (pair? (cdr form)) (eq? (cadr form) 'default))))
         (problem "the second form must be (deny default), not " form))
        ((= index 0) #t)
        ((memq (car form) '(allow deny)) (check-rule form))
        (else (problem "top-level form " index " is neither (version …), (allow …) nor (deny …): " form))))

(define (check-profile)
  (let ((port (open-input-file *profile-file*)))
    (let loop ((form (read port)) (index 0))
      (if (eof-object? form)
          (begin
            (for-each (lambda (param)
                        (if (not (memq (string->symbol (car param)) *used*))
                            (problem "parameter " (car param) " is defined but never used")))
                      *params*)
            (if (< index 2) (problem "only " index " form(s)"))
            (display "sbpl-check: ")
            (if (= *problems* 0)
                (begin (display "ok (") (display index) (display " forms)"))
                (begin (display *problems*) (display " problem(s)")))
            (newline))
          (begin (check-form form index) (loop (read port) (+ index 1)))))))
