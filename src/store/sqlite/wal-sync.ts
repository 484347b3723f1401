/**
 * The fsync behind the embedded store's durability, done by hand so it can leave the event
 * loop. The connection commits with `synchronous=NORMAL`: SQLite writes the WAL frames and
 * returns without waiting for the disk, and keeps the file consistent (a checkpoint syncs
 * the WAL before copying it and the database after). An `fdatasync` of the WAL file then
 * makes every commit written so far durable — WAL frames are appended in commit order and
 * recovery keeps only a valid prefix, so a sync covers whole commits, never part of one.
 *
 * fsync works on the file, not the descriptor, so any descriptor of the WAL will do. The
 * WAL keeps its inode while a connection is open (SQLite deletes it only when the last
 * connection closes); the descriptor is still checked against the path on each sync, and
 * reopened if the file was ever replaced.
 */
import { closeSync, fdatasync, fdatasyncSync, fstatSync, openSync, statSync } from 'node:fs';
import type { Durability } from './group-commit.js';

export class WalSync implements Durability {
  private fd: number | null = null;

  constructor(private readonly walPath: string) {}

  sync(): Promise<void> {
    let fd: number;
    try {
      fd = this.currentFd();
    } catch (error) {
      return Promise.reject(error);
    }
    return new Promise((resolve, reject) => {
      fdatasync(fd, (error) => (error === null ? resolve() : reject(error)));
    });
  }

  syncNow(): void {
    fdatasyncSync(this.currentFd());
  }

  /** Call only when no sync is in flight. */
  close(): void {
    if (this.fd === null) return;
    closeSync(this.fd);
    this.fd = null;
  }

  private currentFd(): number {
    if (this.fd !== null && fstatSync(this.fd).ino === statSync(this.walPath).ino) return this.fd;
    this.close();
    this.fd = openSync(this.walPath, 'r');
    return this.fd;
  }
}
